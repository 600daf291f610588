"""Step 3 of 4: step 2 on several processes: gather the evaluation, one process writes.

Run:   ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu-2-processes.yaml \
           step3_distributed_eval/train.py --output-dir outputs/step3
Read:  README.md beside this file (the lesson); make lesson STEP=N shows the lesson as a diff
"""

# %%
import time

import evaluate
import torch
from accelerate import Accelerator  # the one object this lesson adds
from torch.optim import AdamW
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, get_scheduler, set_seed

from common.checkpoint import load_tokenizer, resolve_checkpoint
from common.cli import parse_args
from common.launch import guard_launch
from common.data import get_dataloaders, load_splits
from common.metric import GLUE_MRPC_METRIC
from common.output import write_metrics


# %%
def training_function(args):
    accelerator = Accelerator()  # knows the device(s) and how many processes there are
    # step 3: what was launched: processes, backend, device (accelerator.print prints on one
    # process per machine)
    accelerator.print(accelerator.state)

    set_seed(args.seed, deterministic=args.deterministic)

    # the data: MRPC pairs, tokenized, in dataloaders that pad each batch to its longest pair
    checkpoint = resolve_checkpoint(args.checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    # step 3: the main process loads and tokenizes first, filling the datasets cache; the
    # others wait for it, then read the cache instead of tokenizing the same pairs again
    with accelerator.main_process_first():
        train_dataloader, eval_dataloader = get_dataloaders(load_splits(args.dataset), tokenizer, args)

    # a pretrained encoder with a new two-class head, whose random weights come from the seed
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=2)
    # the padding token's id, which a GPT-2-style model reads to find each pair's last token
    model.config.pad_token_id = tokenizer.pad_token_id
    optimizer = AdamW(model.parameters(), lr=args.lr)

    # prepare() puts the model and every batch on the right device (no more .to(device));
    # on several processes it also gives each one its own share of the batches and wraps the
    # model in DistributedDataParallel, which averages the gradients of all processes
    train_dataloader, eval_dataloader, model, optimizer = accelerator.prepare(
        train_dataloader, eval_dataloader, model, optimizer
    )

    # the learning rate falls linearly from lr to 0 over all the training steps
    # built after prepare(), from this process's share of the batches, and not prepared:
    # a prepared scheduler steps once per process at every optimizer step
    num_training_steps = args.epochs * len(train_dataloader)
    if args.max_train_steps:  # a shorter run, for tests
        num_training_steps = min(num_training_steps, args.max_train_steps)
    lr_scheduler = get_scheduler(
        "linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=num_training_steps
    )

    # the training loop
    # step 3: one progress bar per machine, not one per process. On 2 processes each optimizer
    # step takes a batch of 8 from each of them (16 pairs), so an epoch is half as many steps
    progress_bar = tqdm(range(num_training_steps), disable=not accelerator.is_local_main_process)
    train_losses = []
    start = time.perf_counter()
    model.train()
    for epoch in range(args.epochs):
        for batch in train_dataloader:
            if len(train_losses) == num_training_steps:
                break
            # no batch.to(device) any more: the prepared dataloader did it
            outputs = model(**batch)
            loss = outputs.loss
            # instead of loss.backward(); with mixed precision (fp16) it also scales the
            # loss, and with gradient accumulation it divides it (neither is on here)
            accelerator.backward(loss)

            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            progress_bar.update(1)
            train_losses.append(loss.item())
    train_seconds = time.perf_counter() - start

    # evaluation: predictions for the whole validation split, then the metric
    metric = evaluate.load(GLUE_MRPC_METRIC)  # the course: evaluate.load("glue", "mrpc")
    all_predictions = []
    all_labels = []  # step 3: the labels travel with the predictions
    start = time.perf_counter()
    model.eval()
    for batch in eval_dataloader:
        # no batch.to(device) here either
        with torch.no_grad():
            outputs = model(**batch)
        predictions = torch.argmax(outputs.logits, dim=-1)
        # step 3: each process has only its own batches; gather them from every process
        all_predictions.append(accelerator.gather(predictions))
        all_labels.append(accelerator.gather(batch["labels"]))
    # step 3: to give every process full batches, the last ones were completed with samples
    # from the start of the dataset; they sit at the end, so keep one prediction per pair of
    # the split, as the prepared loader counts them (on a TPU too, where it has no .dataset).
    # Accelerate's examples call accelerator.gather_for_metrics(...) in the loop instead,
    # which gathers and drops that tail itself
    gathered = torch.cat(all_predictions)
    predictions = gathered[: eval_dataloader.total_dataset_length]
    labels = torch.cat(all_labels)[: eval_dataloader.total_dataset_length]
    eval_metric = metric.compute(predictions=predictions, references=labels)
    eval_seconds = time.perf_counter() - start

    results = {
        "accuracy": eval_metric["accuracy"], "f1": eval_metric["f1"],
        "eval_samples": len(predictions), "predictions": predictions.tolist(),
        "train_losses": train_losses, "train_seconds": train_seconds, "eval_seconds": eval_seconds,
        # how many processes ran it, and on what device, as the Accelerator says
        "num_processes": accelerator.num_processes, "device": str(accelerator.device),
        "eval_gathered": len(gathered),  # step 3: how many were gathered, before the cut
    }
    # step 3: how many predictions were gathered, and how many kept
    accelerator.print(f"gathered {len(gathered)} predictions, kept {len(predictions)}")
    accelerator.print(
        f"validation: accuracy {eval_metric['accuracy']:.4f}, "
        f"f1 {eval_metric['f1']:.4f} ({len(predictions)} examples)"
    )
    if accelerator.is_main_process:  # step 3: one process writes the results, not all of them
        write_metrics(args.output_dir, args, results)  # metrics.json, and a line saying where
    accelerator.end_training()  # step 3: each process leaves the process group before it exits


# %%
def main():
    args = parse_args(description=__doc__)
    guard_launch(joins_processes=True)  # launched as N processes, they join as one run
    training_function(args)


if __name__ == "__main__":
    main()
