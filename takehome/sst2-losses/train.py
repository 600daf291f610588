"""Take-home, lesson 3: SST-2's sentences on several processes, each sentence's own loss kept.

Run:   ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu-2-processes.yaml \
           exercises/sst2-losses/train.py --dataset embedded-sst2 --output-dir outputs/sst2-losses
Read:  takehome/sst2-losses/README.md (the task); make check TASK=sst2-losses grades it
"""

# %%
import time

import torch
from accelerate import Accelerator
from torch.nn.functional import cross_entropy
from torch.optim import AdamW
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, get_scheduler, set_seed

from common.checkpoint import load_tokenizer, resolve_checkpoint
from common.cli import parse_args
from common.data import get_dataloaders, load_splits
from common.launch import check_launch
from common.output import saving_model, write_metrics


# %%
def training_function(args):
    accelerator = Accelerator()
    set_seed(args.seed, deterministic=args.deterministic)

    # the data: single sentences (SST-2: is the sentence good news or bad news?)
    checkpoint = resolve_checkpoint(args.checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    train_loader, eval_loader = get_dataloaders(load_splits(args.dataset), tokenizer, args)

    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=2)
    model.config.pad_token_id = tokenizer.pad_token_id
    optimizer = AdamW(model.parameters(), lr=args.lr)
    train_loader, eval_loader, model, optimizer = accelerator.prepare(
        train_loader, eval_loader, model, optimizer
    )
    steps = args.epochs * len(train_loader)
    if args.max_train_steps:
        steps = min(steps, args.max_train_steps)
    schedule = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0,
                             num_training_steps=steps)

    # training
    bar = tqdm(range(steps))
    train_losses = []
    start = time.perf_counter()
    model.train()
    while len(train_losses) < steps:
        for batch in train_loader:
            if len(train_losses) == steps:
                break
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            bar.update(1)
            train_losses.append(loss.item())
    train_seconds = time.perf_counter() - start

    # evaluation: each sentence's prediction, and each sentence's own loss (not a batch's
    # mean): the validation loss is the mean over the sentences of the split
    start = time.perf_counter()
    model.eval()
    sentence_predictions, sentence_labels, sentence_losses = [], [], []
    for batch in eval_loader:
        with torch.no_grad():
            logits = model(**batch).logits
        sentence_predictions.append(logits.argmax(dim=-1))
        sentence_labels.append(batch["labels"])
        sentence_losses.append(cross_entropy(logits, batch["labels"], reduction="none"))
    predictions = torch.cat(sentence_predictions)
    labels = torch.cat(sentence_labels)
    losses = torch.cat(sentence_losses)
    accuracy = (predictions == labels).double().mean().item()
    eval_loss = losses.double().mean().item()
    eval_seconds = time.perf_counter() - start

    results = {
        "accuracy": accuracy, "eval_loss": eval_loss, "eval_samples": len(predictions),
        "predictions": predictions.tolist(), "train_losses": train_losses,
        "train_seconds": train_seconds, "eval_seconds": eval_seconds,
        "num_processes": accelerator.num_processes, "device": str(accelerator.device),
    }
    print(f"validation: accuracy {accuracy:.4f}, loss {eval_loss:.4f} "
          f"({len(predictions)} sentences)")
    # the trained model and its tokenizer, in <output-dir>/model (what the grader reloads)
    with saving_model(args.output_dir) as folder:
        accelerator.unwrap_model(model).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    write_metrics(args.output_dir, args, results)


# %%
def main():
    args = parse_args(description=__doc__)
    check_launch(joins_processes=True)
    training_function(args)


if __name__ == "__main__":
    main()
