"""Tiny checkpoints of other families than BERT, built offline for the tests: a model with a
sequence-classification head (random weights, a few layers of width 32) and a tokenizer of
its family, trained on the embedded train split's sentences, saved with save_pretrained as a
hub checkpoint is.

    gpt2        a decoder; byte-level BPE whose tokenizer has no padding token
    roberta     an encoder without token_type_ids; <s> </s> <pad> specials
    distilbert  an encoder without token_type_ids; BERT's WordPiece specials
    bart        an encoder-decoder (its head reads the decoder's last </s>)
    t5          an encoder-decoder with a Unigram vocabulary
"""

import json
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

SMALL = dict(hidden=32, layers=2, heads=2, ffn=64, positions=160)
KINDS = ("gpt2", "roberta", "distilbert", "bart", "t5")


def sentences():
    """The embedded train split's sentences (both columns)."""
    from common.data import EMBEDDED_DATA

    rows = [json.loads(line) for line in (EMBEDDED_DATA / "train.jsonl").read_text().splitlines()]
    return [row[column] for row in rows for column in ("sentence1", "sentence2")]


def byte_level_bpe(specials, vocab_size=1200):
    """A byte-level BPE tokenizer (GPT-2's, RoBERTa's and BART's kind) trained here."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(sentences(), trainer)
    return tokenizer


def build(kind, folder):
    """Build the tiny checkpoint `kind` into folder; return the folder's path as a string."""
    import transformers as t

    folder = Path(folder)
    s = SMALL
    if kind == "gpt2":
        core = byte_level_bpe(["<|endoftext|>"])
        tokenizer = t.GPT2TokenizerFast(
            tokenizer_object=core,
            bos_token="<|endoftext|>",
            eos_token="<|endoftext|>",
            unk_token="<|endoftext|>",
        )
        config = t.GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=s["hidden"],
            n_layer=s["layers"],
            n_head=s["heads"],
            n_positions=s["positions"],
            bos_token_id=tokenizer.eos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            num_labels=2,
        )
        model = t.GPT2ForSequenceClassification(config)
    elif kind in ("roberta", "bart"):
        core = byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        core.post_processor = processors.RobertaProcessing(
            ("</s>", core.token_to_id("</s>")), ("<s>", core.token_to_id("<s>"))
        )
        fast = t.RobertaTokenizerFast if kind == "roberta" else t.BartTokenizerFast
        tokenizer = fast(
            tokenizer_object=core,
            bos_token="<s>",
            eos_token="</s>",
            sep_token="</s>",
            cls_token="<s>",
            unk_token="<unk>",
            pad_token="<pad>",
            mask_token="<mask>",
        )
        ids = dict(
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            num_labels=2,
        )
        if kind == "roberta":
            config = t.RobertaConfig(
                vocab_size=len(tokenizer),
                hidden_size=s["hidden"],
                num_hidden_layers=s["layers"],
                num_attention_heads=s["heads"],
                intermediate_size=s["ffn"],
                max_position_embeddings=s["positions"] + 2,
                **ids,
            )
            model = t.RobertaForSequenceClassification(config)
        else:
            config = t.BartConfig(
                vocab_size=len(tokenizer),
                d_model=s["hidden"],
                encoder_layers=1,
                decoder_layers=1,
                encoder_attention_heads=s["heads"],
                decoder_attention_heads=s["heads"],
                encoder_ffn_dim=s["ffn"],
                decoder_ffn_dim=s["ffn"],
                max_position_embeddings=s["positions"],
                decoder_start_token_id=tokenizer.eos_token_id,
                **ids,
            )
            model = t.BartForSequenceClassification(config)
    elif kind == "distilbert":
        from common.checkpoint import EMBEDDED_CHECKPOINT

        bert = t.AutoTokenizer.from_pretrained(EMBEDDED_CHECKPOINT)
        tokenizer = t.DistilBertTokenizerFast(
            tokenizer_object=bert.backend_tokenizer,
            unk_token="[UNK]",
            sep_token="[SEP]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            mask_token="[MASK]",
        )
        config = t.DistilBertConfig(
            vocab_size=len(tokenizer),
            dim=s["hidden"],
            n_layers=s["layers"],
            n_heads=s["heads"],
            hidden_dim=s["ffn"],
            max_position_embeddings=s["positions"],
            pad_token_id=tokenizer.pad_token_id,
            num_labels=2,
        )
        model = t.DistilBertForSequenceClassification(config)
    elif kind == "t5":
        core = Tokenizer(models.Unigram())
        core.normalizer = normalizers.NFKC()
        core.pre_tokenizer = pre_tokenizers.Metaspace()
        core.decoder = decoders.Metaspace()
        core.train_from_iterator(
            sentences(),
            trainers.UnigramTrainer(
                vocab_size=1200, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
            ),
        )
        core.post_processor = processors.TemplateProcessing(
            single="$A </s>",
            pair="$A </s> $B </s>",
            special_tokens=[("</s>", core.token_to_id("</s>"))],
        )
        tokenizer = t.T5TokenizerFast(
            tokenizer_object=core,
            eos_token="</s>",
            unk_token="<unk>",
            pad_token="<pad>",
            extra_ids=0,
        )
        config = t.T5Config(
            vocab_size=len(tokenizer),
            d_model=s["hidden"],
            d_kv=16,
            d_ff=s["ffn"],
            num_layers=1,
            num_decoder_layers=1,
            num_heads=s["heads"],
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
            num_labels=2,
        )
        model = t.T5ForSequenceClassification(config)
    else:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


if __name__ == "__main__":  # python tests/helpers/tiny_checkpoints.py KIND FOLDER
    import sys

    print(build(sys.argv[1], sys.argv[2]))
