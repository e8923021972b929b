"""The task vocabulary (:mod:`real.tasks.tokenizer`) as a transformers tokenizer, for the
frameworks that take one (TRL's ``processing_class``, verl's ``tokenizer``).

A ``tokenizers`` word-level model over :data:`~real.tasks.tokenizer.VOCAB` with a regex
pre-tokenizer that splits text the way :func:`~real.tasks.tokenizer.encode` does (a
tag+digit pair ``A7`` first, else one character), ``<bos>`` prepended by the
post-processor (so ``tok(text)["input_ids"]`` equals ``Problem.prompt_ids``), pieces
joined without spaces on decode. Ids are the project's fixed ids; nothing is downloaded.
"""

from __future__ import annotations

from rolloutlab.real.tasks.tokenizer import BOS, EOS, PAD, SPECIALS, VOCAB


def task_tokenizer():
    """A ``transformers.PreTrainedTokenizerFast`` of the task vocabulary: pad ``<pad>``
    (id 0), bos ``<bos>`` (1), eos ``<eos>`` (2), padding on the left (TRL's rule for
    generation). A character outside the vocabulary becomes ``<pad>`` (the task's prompts
    hold none; :func:`~real.tasks.tokenizer.encode` raises on it instead)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({tok: i for i, tok in enumerate(VOCAB)}, unk_token=PAD))
    # a pair A0..P9 before its characters: greedy longest match, as encode()
    core.pre_tokenizer = pre_tokenizers.Split(Regex("[A-P][0-9]|."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, VOCAB.index(BOS))]
    )
    core.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        padding_side="left",
    )
