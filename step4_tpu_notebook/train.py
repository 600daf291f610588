"""Step 4 of 4: step 3 as Accelerate's TPU notebook: one function started by notebook_launcher.

Run:   python step4_tpu_notebook/train.py --num-processes 2 --output-dir outputs/step4
Read:  README.md beside this file (the lesson); make lesson STEP=N shows the lesson as a diff
"""

# %%
import copy  # step 4: a model of its own for each TPU core
import time

import evaluate
import torch
from accelerate import Accelerator  # the one object this lesson adds
from accelerate import notebook_launcher  # step 4: starts a function in every process
from accelerate.utils import DistributedType, is_torch_xla_available  # step 4: TPUs (torch_xla)
from torch.optim import AdamW
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, get_scheduler, set_seed

from common.checkpoint import load_tokenizer, resolve_checkpoint
from common.cli import parse_args
from common.launch import free_port, guard_launch  # step 4: a free port
from common.data import get_dataloaders, load_splits
from common.metric import GLUE_MRPC_METRIC
from common.output import write_metrics


# %%
def training_function(model, args):  # step 4: the model comes in from outside
    # knows the device(s) and how many processes there are; step 4: created here, inside the
    # launched function. With no GPU or TPU, cpu=True makes the processes of notebook_launcher
    # one group (gloo on the CPU); without it each would be a separate one-process run
    accelerator = Accelerator(cpu=not (torch.cuda.is_available() or is_torch_xla_available()))
    # what was launched: processes, backend, device (accelerator.print prints on one
    # process per machine)
    accelerator.print(accelerator.state)

    # the data: MRPC pairs, tokenized, in dataloaders that pad each batch to its longest pair
    checkpoint = resolve_checkpoint(args.checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    # the main process loads and tokenizes first, filling the datasets cache; the
    # others wait for it, then read the cache instead of tokenizing the same pairs again
    with accelerator.main_process_first():
        # step 4: every pair padded to 128 tokens instead, so that full batches share one
        # shape: XLA compiles its graphs again for each new shape (on one device the epoch's
        # last, shorter batch is a second one)
        train_dataloader, eval_dataloader = get_dataloaders(load_splits(args.dataset), tokenizer,
                                                            args, pad_to_max_length=128)

    # the padding token's id, which a GPT-2-style model reads to find each pair's last token
    model.config.pad_token_id = tokenizer.pad_token_id
    if accelerator.distributed_type == DistributedType.XLA:
        # step 4: on TPU v2/v3 one process runs this in a thread per core, all given this one
        # model, which prepare() moves in place: each core takes its own copy. Dropout draws from
        # the core's own generator: seeded alone, with the call Accelerate's set_seed makes
        # (set_seed here would seed again the CPU generators main() seeded; in main(), on a
        # TPU, it would start the TPU runtime before the launch)
        import torch_xla.core.xla_model as xm
        model = copy.deepcopy(model)
        xm.set_rng_state(args.seed)
    optimizer = AdamW(model.parameters(), lr=args.lr)

    # prepare() puts the model and every batch on the right device (no more .to(device));
    # on several processes it also gives each one its own share of the batches and wraps the
    # model in DistributedDataParallel, which averages the gradients of all processes
    train_dataloader, eval_dataloader, model, optimizer = accelerator.prepare(
        train_dataloader, eval_dataloader, model, optimizer
    )
    # step 4: on a TPU it wraps nothing: it moves the model to this process's XLA device, and the
    # prepared optimizer.step() averages the gradients of all devices before it steps

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
    # one progress bar per machine, not one per process. On 2 processes each optimizer
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
            # step 4: the loss stays on the device: .item() at every step would make the host
            # wait for the TPU each time; all the losses are read once, after training
            train_losses.append(loss.detach())
    train_losses = torch.stack(train_losses).tolist()  # step 4: all read at once
    train_seconds = time.perf_counter() - start

    # evaluation: predictions for the whole validation split, then the metric
    metric = evaluate.load(GLUE_MRPC_METRIC)  # the course: evaluate.load("glue", "mrpc")
    all_predictions = []
    all_labels = []  # the labels travel with the predictions
    start = time.perf_counter()
    model.eval()
    for batch in eval_dataloader:
        # no batch.to(device) here either
        with torch.no_grad():
            outputs = model(**batch)
        predictions = torch.argmax(outputs.logits, dim=-1)
        # each process has only its own batches; gather them from every process
        all_predictions.append(accelerator.gather(predictions))
        all_labels.append(accelerator.gather(batch["labels"]))
    # to give every process full batches, the last ones were completed with samples
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
        "eval_gathered": len(gathered),  # how many were gathered, before the cut
    }
    # how many predictions were gathered, and how many kept
    accelerator.print(f"gathered {len(gathered)} predictions, kept {len(predictions)}")
    accelerator.print(
        f"validation: accuracy {eval_metric['accuracy']:.4f}, "
        f"f1 {eval_metric['f1']:.4f} ({len(predictions)} examples)"
    )
    if accelerator.is_main_process:  # one process writes the results, not all of them
        write_metrics(args.output_dir, args, results)  # metrics.json, and a line saying where
    accelerator.end_training()  # each process leaves the process group before it exits


# %%
def main():
    args = parse_args(description=__doc__)
    # launched as N processes, they join as one run; step 4: or started here, by
    # notebook_launcher: checked before it starts them
    guard_launch(joins_processes=True, starts_processes=args.num_processes)
    # step 4: the model is created once, before the launch, on the CPU: its new head gets its
    # random weights from this seed, and every launched process starts from this one copy (keep
    # it off the TPU here: torch_xla refuses to launch once the TPU has been used)
    set_seed(args.seed, deterministic=args.deterministic)
    checkpoint = resolve_checkpoint(args.checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=2)
    # step 4: start training_function in num_processes processes; in Colab or Kaggle with a TPU,
    # in one process per TPU chip (num_processes is then ignored). They meet on a free port:
    # notebook_launcher's default, 29500, may be taken by another user of the machine
    notebook_launcher(training_function, (model, args), num_processes=args.num_processes,
                      use_port=str(args.port or free_port()))


if __name__ == "__main__":
    main()
