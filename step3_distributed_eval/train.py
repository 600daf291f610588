"""Step 3 of 4: step 2 on several processes: gather the evaluation, one process writes.

Run:   ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu-2-processes.yaml \
           step3_distributed_eval/train.py --output-dir outputs/step3
Read:  README.md beside this file (the lesson); make lesson STEP=N shows the lesson as a diff
"""

# %%
import time

try:  # the course's packages: in the environment make install made
    import evaluate
    import torch
    from accelerate import Accelerator
    from torch.optim import AdamW
    from tqdm.auto import tqdm
    from transformers import AutoModelForSequenceClassification, get_scheduler, set_seed

    from common.checkpoint import load_tokenizer, resolve_checkpoint
    from common.cli import parse_args
    from common.data import get_dataloaders, load_splits
    from common.diverged import stop_if_diverged
    from common.launch import check_launch
    from common.metric import GLUE_MRPC_METRIC
    from common.output import saving_model, write_metrics
except ModuleNotFoundError as missing:  # another Python: one line, not a traceback
    raise SystemExit(f"error: {missing}: this Python is not the course's environment; run "
                     "the course with .venv/bin/python (or after source .venv/bin/activate; if "
                     "you did, make install says what is wrong with .venv), or in a notebook "
                     "its setup cell first")


# %%
def training_function(args):
    accelerator = Accelerator()  # knows this machine's devices and how many processes run
    accelerator.print(accelerator.state)  # what was launched, printed once per machine

    set_seed(args.seed, deterministic=args.deterministic)

    # the data: MRPC pairs, tokenized, in dataloaders that pad each batch to its longest pair
    checkpoint = resolve_checkpoint(args.checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    # the main process tokenizes first and fills the cache; the others then read it
    with accelerator.main_process_first():
        train_dataloader, eval_dataloader = get_dataloaders(load_splits(args.dataset), tokenizer, args)

    # a pretrained encoder with a new two-class head, whose random weights come from the seed
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=2)
    # the padding token's id, which a GPT-2-style model reads to find each pair's last token
    model.config.pad_token_id = tokenizer.pad_token_id
    optimizer = AdamW(model.parameters(), lr=args.lr)

    # prepare() readies them for this machine's devices and processes: use the objects it returns
    train_dataloader, eval_dataloader, model, optimizer = accelerator.prepare(
        train_dataloader, eval_dataloader, model, optimizer
    )

    # the learning rate falls linearly from lr to 0 over all the training steps
    num_training_steps = args.epochs * len(train_dataloader)
    if args.max_train_steps:  # a shorter run, for tests
        num_training_steps = min(num_training_steps, args.max_train_steps)
    lr_scheduler = get_scheduler(
        "linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=num_training_steps
    )

    # the training loop
    # one progress bar per machine, not one per process
    progress_bar = tqdm(range(num_training_steps), disable=not accelerator.is_local_main_process)
    train_losses = []
    start = time.perf_counter()
    model.train()
    for epoch in range(args.epochs):
        for batch in train_dataloader:
            if len(train_losses) == num_training_steps:
                break
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)  # instead of loss.backward()

            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            progress_bar.update(1)
            train_losses.append(loss.item())
            stop_if_diverged(train_losses, args)  # a NaN or infinite loss stops the run, named
    train_seconds = time.perf_counter() - start

    # evaluation: predictions for the whole validation split, then the metric
    metric = evaluate.load(GLUE_MRPC_METRIC)  # the course: evaluate.load("glue", "mrpc")
    all_predictions = []
    all_labels = []  # each process holds only its share of the labels too
    start = time.perf_counter()
    model.eval()
    for batch in eval_dataloader:
        with torch.no_grad():
            outputs = model(**batch)
        predictions = torch.argmax(outputs.logits, dim=-1)
        # gather every process's share, so that each process holds them all
        all_predictions.append(accelerator.gather(predictions))
        all_labels.append(accelerator.gather(batch["labels"]))
    # keep one prediction per pair: the last batches were filled up with repeated pairs
    gathered = torch.cat(all_predictions)
    predictions = gathered[: eval_dataloader.total_dataset_length]
    labels = torch.cat(all_labels)[: eval_dataloader.total_dataset_length]
    eval_metric = metric.compute(predictions=predictions, references=labels)
    eval_seconds = time.perf_counter() - start

    results = {
        "accuracy": eval_metric["accuracy"], "f1": eval_metric["f1"],
        "eval_samples": len(predictions), "predictions": predictions.tolist(),
        "train_losses": train_losses, "train_seconds": train_seconds, "eval_seconds": eval_seconds,
        "num_processes": accelerator.num_processes, "device": str(accelerator.device),
        "eval_gathered": len(gathered),  # how many were gathered, before the cut
    }
    accelerator.print(f"gathered {len(gathered)} predictions, kept {len(predictions)}")
    accelerator.print(
        f"validation: accuracy {eval_metric['accuracy']:.4f}, "
        f"f1 {eval_metric['f1']:.4f} ({len(predictions)} examples)"
    )
    accelerator.wait_for_everyone()  # every process has finished its work before one saves it
    if accelerator.is_main_process:  # one process writes the results, not all of them
        # the trained model and its tokenizer, which from_pretrained(<output-dir>/model) reloads
        with saving_model(args.output_dir) as folder:  # filled aside, then put in place whole
            # the model prepare() was given, without the wrapper prepare() may have put around it
            accelerator.unwrap_model(model).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        write_metrics(args.output_dir, args, results)  # metrics.json, and a line saying where
    accelerator.end_training()  # leave the process group, if there is one, before exiting


# %%
def main():
    args = parse_args(description=__doc__)
    check_launch(joins_processes=True)  # launched as N processes, they join as one run
    training_function(args)


if __name__ == "__main__":
    main()
