"""A tiny fixed-vocabulary tokenizer for the digit-chain task (:mod:`real.tasks.digit_chain`).

Tokens: three specials, the ten digits, the sixteen position tags ``a..p``, ``= > ?``, and
160 prompt tokens ``A0..P9`` (an upper-case tag and its digit as one token). Encoding is
greedy longest match, so ``"B7"`` is one token and ``"b7"`` two. Prompts list their digits
as tag+digit tokens, which makes "find the digit of tag ``b``" a one-layer lookup for the
model (with separate characters a 2-layer induction head is needed and the tiny model
learned it to only ~75 % in a few hundred warm-start steps).
Ids are fixed (the vocabulary is part of the model contract: ``vocab_size`` in
``configs/tiny_llama/config.json`` is at least :data:`VOCAB_SIZE`). No files, nothing downloaded.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)
TAGS = string.ascii_lowercase[:16]
"""Position tags ``a..p`` of the scratchpad: the task's lists hold at most 16 digits."""
PROMPT_TAGS = TAGS.upper()
"""Position tags of the prompt's tag+digit tokens."""
CHARS = tuple(string.digits) + tuple(TAGS) + ("=", ">", "?")
PAIRS = tuple(f"{t}{d}" for t in PROMPT_TAGS for d in string.digits)
VOCAB: tuple[str, ...] = SPECIALS + CHARS + PAIRS
VOCAB_SIZE = len(VOCAB)
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
_TO_ID = {tok: i for i, tok in enumerate(VOCAB)}


def encode(text: str) -> list[int]:
    """Token ids of ``text`` (greedy longest match; specials are added by the caller).

    Raises: ValueError naming the first character that starts no token.
    """
    ids, i = [], 0
    while i < len(text):
        if text[i : i + 2] in _TO_ID:
            ids.append(_TO_ID[text[i : i + 2]])
            i += 2
        elif text[i] in _TO_ID and text[i] not in SPECIALS:
            ids.append(_TO_ID[text[i]])
            i += 1
        else:
            raise ValueError(
                f"tokenizer: {text[i : i + 2]!r} at offset {i} of {text!r} starts no "
                f"token of the vocabulary"
            )
    return ids


def decode(ids: Sequence[int]) -> str:
    """Text of ``ids``; specials are dropped, decoding stops at the first EOS."""
    out = []
    for i in ids:
        if i == EOS_ID:
            break
        if i >= len(SPECIALS):
            out.append(VOCAB[i])
    return "".join(out)
