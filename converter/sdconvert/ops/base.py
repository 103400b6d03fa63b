"""The one definition of a fused op: name, version, attrs dataclass, flexbuffer codec, numpy reference.

Every consumer reads this: the rewrite rules build options with :meth:`OpSpec.encode`, ``sdconvert inspect`` decodes them,
tests compare backends against :attr:`OpSpec.reference`, and the C++ attrs parser in ``custom_ops/ops/<op>/`` mirrors
:meth:`OpSpec.decode` (same keys, same validation) so that CPU, OpenCL and GL kernels agree on meaning.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

import numpy as np

A = TypeVar("A")


class OpAttrError(ValueError):
    """Custom-op options that cannot be decoded or violate the op's contract."""


@dataclass(frozen=True)
class OpSpec(Generic[A]):
    """A versioned fused op. ``reference(inputs, attrs)`` is the float64-accurate numpy semantics."""

    name: str
    version: int
    attrs_type: type[A]
    reference: Callable[[list[np.ndarray], A], np.ndarray]
    num_inputs: int
    doc: str = ""

    def encode(self, attrs: A) -> bytes:
        """Flexbuffer map of the attrs (field names are the keys); validates first."""
        from flatbuffers import flexbuffers

        self._validate(attrs)
        return bytes(flexbuffers.Dumps(dataclasses.asdict(attrs)))

    def decode(self, data: bytes | bytearray | memoryview) -> A:
        """Parse and validate options; raises :class:`OpAttrError` with the reason on any problem."""
        from flatbuffers import flexbuffers

        try:
            raw = flexbuffers.Loads(bytes(data))
        except Exception as e:  # noqa: BLE001 - any parse failure of untrusted bytes is an attr error
            raise OpAttrError(f"{self.name}: options are not a valid flexbuffer ({type(e).__name__})") from None
        if not isinstance(raw, dict):
            raise OpAttrError(f"{self.name}: options must be a flexbuffer map, got {type(raw).__name__}")
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(self.attrs_type):  # type: ignore[arg-type]
            if f.name not in raw:
                if f.default is dataclasses.MISSING:
                    raise OpAttrError(f"{self.name}: missing attr {f.name!r}")
                continue
            kwargs[f.name] = _coerce(self.name, f.name, raw[f.name], f.type)
        attrs = self.attrs_type(**kwargs)
        self._validate(attrs)
        return attrs

    def _validate(self, attrs: A) -> None:
        check = getattr(attrs, "validate", None)
        if check is not None:
            problem = check()
            if problem:
                raise OpAttrError(f"{self.name}: {problem}")


def _coerce(op: str, key: str, value: Any, type_name: Any) -> Any:
    t = type_name if isinstance(type_name, str) else getattr(type_name, "__name__", str(type_name))
    if t == "bool":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return bool(value)
    elif t == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
    elif t == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif t == "str":
        if isinstance(value, (str, bytes)):
            return value.decode() if isinstance(value, bytes) else value
    raise OpAttrError(f"{op}: attr {key!r} must be {t}, got {type(value).__name__}")
