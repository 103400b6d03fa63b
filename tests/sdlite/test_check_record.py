"""A model that passed validation and has not changed since is not walked again (sdlite.check_record): what would
make a remembered verdict wrong -- a rewritten file (even with its old size and modification time put back), a
corrupt entry, another validator -- makes the check run again; a folder that cannot be written costs nothing but the
reuse."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import sdlite.model_check as model_check
from sdlite import check_record
from sdlite.model_check import InvalidModelError, validate_model


@pytest.fixture()
def model(tiny_export: Path, tmp_path: Path) -> Path:
    path = tmp_path / "unet.tflite"
    shutil.copyfile(tiny_export / "unet.tflite", path)
    return path


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = model_check.check_model

    def counted(path=None, **kwargs):
        calls.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(model_check, "check_model", counted)
    return calls


def test_an_unchanged_model_is_checked_once(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_checks(monkeypatch)
    record = tmp_path / "record"
    first = validate_model(model, record=record)
    again = validate_model(model, record=record)
    assert len(calls) == 1
    assert again == first and again.fused_ops == first.fused_ops and again.op_histogram == first.op_histogram
    assert validate_model(model, record=None) == first and len(calls) == 2  # record=None: always checked


def test_a_rewritten_model_is_checked_again(model: Path, tmp_path: Path) -> None:
    record = tmp_path / "record"
    validate_model(model, record=record)
    st = model.stat()
    model.write_bytes(b"\0" * st.st_size)  # same size, then its old times put back: only the status change moved
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(InvalidModelError):
        validate_model(model, record=record)


def test_a_corrupt_entry_is_ignored_and_replaced(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "record"
    expected = validate_model(model, record=record)
    (entry,) = record.iterdir()
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    calls = _count_checks(monkeypatch)
    assert validate_model(model, record=record) == expected and len(calls) == 1
    assert validate_model(model, record=record) == expected and len(calls) == 1  # rewritten whole


def test_another_library_is_another_verdict(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The delegate's fused-op check is part of the verdict: a model checked without the library is checked again
    once it is there."""
    record = tmp_path / "record"
    validate_model(model, record=record)
    monkeypatch.setattr(check_record, "_validator_stamp", lambda: ["another validator"])
    calls = _count_checks(monkeypatch)
    validate_model(model, record=record)
    assert len(calls) == 1


def test_a_refused_model_is_not_remembered(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"TFL3" * 64)
    record = tmp_path / "record"
    for _ in range(2):
        with pytest.raises(InvalidModelError):
            validate_model(bad, record=record)
    assert not record.exists() or not any(record.iterdir())


def test_an_unwritable_record_costs_only_the_reuse(model: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    calls = _count_checks(monkeypatch)
    first = validate_model(model, record=blocker / "record")
    assert validate_model(model, record=blocker / "record") == first and len(calls) == 2


def test_the_record_keeps_the_newest_entries(tiny_export: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_record, "MAX_ENTRIES", 2)
    record = tmp_path / "record"
    for k in range(3):
        path = tmp_path / f"m{k}.tflite"
        shutil.copyfile(tiny_export / "text_encoder.tflite", path)
        validate_model(path, record=record)
    assert len(list(record.iterdir())) == 2
