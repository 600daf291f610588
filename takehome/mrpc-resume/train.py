"""Take-home, saving: MRPC on several processes, a model that reloads and a run that resumes.

Run:   ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu-2-processes.yaml \
           exercises/mrpc-resume/train.py --save-state-at 30 --output-dir outputs/mrpc-resume
       then the same with --resume-from outputs/mrpc-resume/state --output-dir outputs/resumed
Read:  takehome/mrpc-resume/README.md (the task); make check TASK=mrpc-resume grades it
"""

# %%
import argparse
import itertools
import os
import time
from pathlib import Path

import evaluate
import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.optim import AdamW
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, get_scheduler, set_seed

from common.checkpoint import load_tokenizer, resolve_checkpoint
from common.cli import parse_args
from common.data import get_dataloaders, load_splits
from common.launch import check_launch
from common.metric import GLUE_MRPC_METRIC
from common.output import saving_model, write_metrics


# %%
def training_function(args):
    # the order of the batches a function of the seed and the epoch alone: a resumed run
    # sees the batches the saved run would have seen next
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    set_seed(args.seed, deterministic=args.deterministic)

    # the data: MRPC pairs, as in the course's steps
    checkpoint = resolve_checkpoint(args.checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    with accelerator.main_process_first():
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
    # save_state saves what prepare() returned, what is registered here, and the random
    # generators
    accelerator.register_for_checkpointing(schedule)

    def batches_from(epoch, skip):
        """The training batches from this epoch on, its first `skip` left out."""
        for each in range(epoch, args.epochs):
            train_loader.set_epoch(each)  # the seedable order of this epoch
            yield from accelerator.skip_first_batches(train_loader, skip) \
                if skip and each == epoch else train_loader

    # training, from the start or from a saved state
    done, batches = 0, batches_from(0, 0)
    if args.resume_from:
        done = int(Path(args.resume_from, "steps.txt").read_text())
        batches = batches_from(*divmod(done, len(train_loader)))
        # starting an epoch draws from the random generators, as the saved run did before it
        # saved: so the first batch comes before the state is loaded
        first = next(batches)
        accelerator.load_state(args.resume_from)  # weights, optimizer, schedule, random generators
        batches = itertools.chain([first], batches)
    bar = tqdm(range(steps), initial=done, disable=not accelerator.is_local_main_process)
    train_losses = []
    start = time.perf_counter()
    model.train()
    for batch in batches:
        if done == steps:
            break
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        bar.update(1)
        train_losses.append(loss.item())
        done += 1
        if done == args.save_state_at:  # the whole training state, to resume from
            state = os.path.join(args.output_dir, "state")
            if accelerator.is_main_process:
                accelerator.save_state(state)
                Path(state, "steps.txt").write_text(str(done))
    train_seconds = time.perf_counter() - start

    # evaluation: the whole split, each pair once (lesson 3)
    metric = evaluate.load(GLUE_MRPC_METRIC)
    all_predictions, all_labels = [], []
    start = time.perf_counter()
    model.eval()
    for batch in eval_loader:
        with torch.no_grad():
            logits = model(**batch).logits
        # every process's share, the duplicated tail of the last batch cut
        predictions, labels = accelerator.gather_for_metrics((logits.argmax(dim=-1),
                                                               batch["labels"]))
        all_predictions.append(predictions)
        all_labels.append(labels)
    predictions, labels = torch.cat(all_predictions), torch.cat(all_labels)
    eval_metric = metric.compute(predictions=predictions, references=labels)
    eval_seconds = time.perf_counter() - start

    results = {
        "accuracy": eval_metric["accuracy"], "f1": eval_metric["f1"],
        "eval_samples": len(predictions), "predictions": predictions.tolist(),
        "train_losses": train_losses, "train_seconds": train_seconds,
        "eval_seconds": eval_seconds, "num_processes": accelerator.num_processes,
        "device": str(accelerator.device),
    }
    accelerator.print(f"validation: accuracy {eval_metric['accuracy']:.4f}, "
                      f"f1 {eval_metric['f1']:.4f} ({len(predictions)} pairs)")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        # the trained model and its tokenizer, in <output-dir>/model
        with saving_model(args.output_dir) as folder:
            accelerator.unwrap_model(model).config.save_pretrained(folder)
            torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"))
            tokenizer.save_pretrained(folder)
        write_metrics(args.output_dir, args, results)
    accelerator.end_training()


# %%
def main():
    # this script's own flags first; the course's (common/cli.py) take the rest
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--save-state-at", type=int, metavar="STEPS",
                     help="save the whole training state after this many optimizer steps, in "
                          "<output-dir>/state")
    own.add_argument("--resume-from", metavar="STATE",
                     help="go on from a state saved by --save-state-at")
    saving, rest = own.parse_known_args()
    args = parse_args(rest, description=__doc__)
    args.save_state_at, args.resume_from = saving.save_state_at, saving.resume_from
    check_launch(joins_processes=True)
    training_function(args)


if __name__ == "__main__":
    main()
