"""CLIP BPE tokenizer for SD 1.x text encoders, plus building the HF-format vocabulary files.

The tokenizer reads HF-format ``vocab.json`` + ``merges.txt`` and runs the BPE with the ``tokenizers``
library (Rust, fast). Pre-processing follows CLIP: NFC, collapse whitespace, lowercase, split with the CLIP
word regex, byte-level alphabet, ``</w>`` word ends; then ``BOS ids EOS`` padded with EOS to 77.

Trade-offs:
* Like ``transformers.CLIPTokenizer`` (what diffusers uses) and unlike OpenAI's reference code, no ``ftfy``
  text repair and no HTML unescaping is done, so token ids match diffusers exactly.
* The BPE "word" is exactly one CLIP-regex match (no second GPT-2 regex split), as in OpenAI's reference.
* Over-long prompts are truncated to ``max_length`` with a :class:`PromptTruncatedWarning` naming the dropped
  text (diffusers logs the same), not rejected.
"""
from __future__ import annotations

import gzip
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdlite.errors import SdliteError

BOS_TOKEN = "<|startoftext|>"
EOS_TOKEN = "<|endoftext|>"
CLIP_VOCAB_SIZE = 49408
CLIP_MAX_LENGTH = 77
# Number of merges CLIP keeps from bpe_simple_vocab_16e6.txt: vocab 49408 = 2*256 bytes + merges + 2 specials.
CLIP_NUM_MERGES = CLIP_VOCAB_SIZE - 2 * 256 - 2
# One BPE "word": the special tokens, English contractions, a letter run, a single digit, or a punctuation run.
CLIP_WORD_PATTERN = (
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"
)
BPE_FILENAME = "bpe_simple_vocab_16e6.txt.gz"


class PromptTruncatedWarning(UserWarning):
    """A prompt had more than ``max_length - 2`` tokens; the tail was dropped."""


def byte_alphabet() -> list[str]:
    """The 256 printable characters standing for bytes 0..255, in CLIP/GPT-2 vocabulary order.

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards in byte order.
    The list order (printable bytes first) is the order of the first 256 vocabulary ids.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = [chr(b) for b in printable]
    extra = 0
    for b in range(256):
        if b not in printable:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def find_clip_bpe() -> Path:
    """Path of the cached CLIP merges file, or a :class:`SdliteError` saying how to fetch it."""
    path = Path.home() / ".cache" / "sdconvert" / BPE_FILENAME
    if not path.is_file():
        raise SdliteError(f"CLIP BPE file not found at {path}; run `python scripts/fetch_clip_bpe.py` to fetch it")
    return path


def build_clip_vocab_files(bpe_gz: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write HF-format ``vocab.json`` and ``merges.txt`` (49,408 tokens) built from CLIP's ``bpe_gz``.

    Also writes a small ``tokenizer_config.json`` (max length 77, CLIP special tokens) so the folder loads
    directly with ``transformers.CLIPTokenizer.from_pretrained``.

    Same construction as CLIP: the 256 byte characters, the same with ``</w>``, one token per merge (first
    48,894 merge lines after the header), then ``<|startoftext|>`` and ``<|endoftext|>``.
    Returns ``(vocab_path, merges_path)``.
    """
    try:
        lines = gzip.open(bpe_gz, "rt", encoding="utf-8").read().split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise SdliteError(f"cannot read CLIP BPE file {bpe_gz}: {exc}") from None
    merge_lines = lines[1 : CLIP_NUM_MERGES + 1]
    merges = [tuple(line.split()) for line in merge_lines]
    if len(merges) != CLIP_NUM_MERGES or any(len(m) != 2 for m in merges):
        raise SdliteError(f"{bpe_gz} is not a CLIP BPE merges file (expected {CLIP_NUM_MERGES} merge pairs)")
    alphabet = byte_alphabet()
    tokens = alphabet + [c + "</w>" for c in alphabet] + ["".join(m) for m in merges] + [BOS_TOKEN, EOS_TOKEN]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != CLIP_VOCAB_SIZE:
        raise SdliteError(f"{bpe_gz}: built {len(vocab)} distinct tokens, expected {CLIP_VOCAB_SIZE}")
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab_path, merges_path = out_dir / "vocab.json", out_dir / "merges.txt"
    vocab_path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    merges_path.write_text("#version: 0.2\n" + "\n".join(merge_lines) + "\n", encoding="utf-8")
    # Lets transformers.CLIPTokenizer.from_pretrained(out_dir) (diffusers) load it with SD's settings.
    hf_config = {
        "tokenizer_class": "CLIPTokenizer", "model_max_length": CLIP_MAX_LENGTH, "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN, "unk_token": EOS_TOKEN, "do_lower_case": True,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(hf_config, indent=1), encoding="utf-8")
    return vocab_path, merges_path


@dataclass(frozen=True)
class EncodedPrompt:
    """Token ids of one prompt, padded to ``max_length``."""

    ids: np.ndarray  # int32 [max_length]: BOS, tokens, EOS, EOS padding
    num_tokens: int  # content tokens kept (without BOS/EOS)
    dropped_text: str | None  # decoded text of the truncated tail, None when nothing was dropped


class CLIPTokenizer:
    """CLIP BPE tokenizer over HF-format vocabulary files (``vocab.json`` token->id, ``merges.txt``)."""

    def __init__(self, vocab_file: Path, merges_file: Path, max_length: int = CLIP_MAX_LENGTH) -> None:
        from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
        from tokenizers.models import BPE

        for path in (vocab_file, merges_file):
            if not Path(path).is_file():
                raise SdliteError(f"tokenizer file not found: {path}")
        try:
            model = BPE.from_file(
                str(vocab_file), str(merges_file), continuing_subword_prefix="", end_of_word_suffix="</w>",
                unk_token=EOS_TOKEN, fuse_unk=False,
            )
        except Exception as exc:  # the Rust side raises plain Exception subclasses
            raise SdliteError(f"cannot load tokenizer files {vocab_file}, {merges_file}: {exc}") from None
        tok = Tokenizer(model)
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
        )
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(CLIP_WORD_PATTERN), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([BOS_TOKEN, EOS_TOKEN])
        bos, eos = tok.token_to_id(BOS_TOKEN), tok.token_to_id(EOS_TOKEN)
        if bos is None or eos is None:
            raise SdliteError(f"{vocab_file} lacks the CLIP special tokens {BOS_TOKEN} / {EOS_TOKEN}")
        self._tok = tok
        self.bos_id: int = bos
        self.eos_id: int = eos
        self.pad_id: int = eos
        self.max_length = max_length

    @classmethod
    def from_folder(cls, folder: Path, max_length: int = CLIP_MAX_LENGTH) -> "CLIPTokenizer":
        """Load ``folder/vocab.json`` and ``folder/merges.txt``."""
        return cls(Path(folder) / "vocab.json", Path(folder) / "merges.txt", max_length)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def tokenize(self, text: str) -> list[str]:
        """BPE tokens of ``text`` (no BOS/EOS)."""
        return self._tok.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str) -> EncodedPrompt:
        """``BOS tokens EOS`` padded with EOS to ``max_length``; truncates (with a warning) when too long."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        room = self.max_length - 2
        dropped = None
        if len(ids) > room:
            dropped = self.decode(ids[room:])
            warnings.warn(
                f"prompt is longer than {self.max_length} tokens and was truncated; dropped: {dropped!r}",
                PromptTruncatedWarning,
                stacklevel=2,
            )
            ids = ids[:room]
        padded = [self.bos_id, *ids, self.eos_id] + [self.pad_id] * (room - len(ids))
        return EncodedPrompt(np.asarray(padded, dtype=np.int32), len(ids), dropped)

    def __call__(self, texts: list[str] | str) -> np.ndarray:
        """int32 ``[len(texts), max_length]`` ids (a single string gives one row)."""
        if isinstance(texts, str):
            texts = [texts]
        return np.stack([self.encode(t).ids for t in texts]) if texts else np.zeros((0, self.max_length), np.int32)

    def decode(self, ids: list[int] | np.ndarray) -> str:
        """Text of ``ids`` with special tokens removed; ``</w>`` becomes a space."""
        text = self._tok.decode([int(i) for i in ids], skip_special_tokens=True)
        return text.replace("</w>", " ").strip()
