"""Step 4 of 4: step 3 as Accelerate's TPU notebook: one function started by notebook_launcher.

Run:   python step4_tpu_notebook/train.py --num-processes 2 --output-dir outputs/step4
Read:  README.md beside this file (the lesson); make lesson STEP=N shows the lesson as a diff
"""

# %%
import copy  # step 4: a model of its own for each TPU core
import time

import evaluate
import torch
from accelerate import Accelerator  # step 2: the one object this lesson adds
from accelerate import notebook_launcher  # step 4: starts a function in every process
from accelerate.utils import DistributedType, is_torch_xla_available  # step 4: TPUs (torch_xla)
from torch.optim import AdamW
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, get_scheduler, set_seed

from common.checkpoint import load_tokenizer, resolve_checkpoint
from common.cli import parse_args
from common.launch import free_port, guard_launch  # step 4: a free port
from common.data import get_dataloaders, load_mrpc
from common.metric import GLUE_MRPC_METRIC
from common.output import write_metrics


# %%
def training_function(model, args):  # step 4: the model comes in from outside
    # step 2: knows the device(s) and how many processes there are.
    # step 4: created here, inside the launched function. With no GPU or TPU, cpu=True makes
    # the processes of notebook_launcher one group (gloo on the CPU); without it each would
    # be a separate one-process run that only sees its own data.
    accelerator = Accelerator(cpu=not (torch.cuda.is_available() or is_torch_xla_available()))
    # step 3: what was launched: processes, backend, device (accelerator.print prints on one
    # process per machine)
    accelerator.print(accelerator.state)

    # the data: MRPC pairs, tokenized, in dataloaders that pad each batch to its longest pair
    # step 2: the main process loads and tokenizes first, filling the datasets cache; the
    # others wait for it, then read the cache instead of tokenizing the same pairs again
    with accelerator.main_process_first():
        raw_datasets = load_mrpc(args.dataset)
        tokenizer = load_tokenizer(model.name_or_path)  # step 4: the model knows its checkpoint
        # step 4: except that every batch is now padded to 128 tokens, the same shape every
        # time, because XLA compiles a new graph for each new shape
        train_dataloader, eval_dataloader = get_dataloaders(
            raw_datasets, tokenizer, args.train_batch_size, args.eval_batch_size,
            pad_to_max_length=128,
        )

    if accelerator.distributed_type == DistributedType.XLA:
        # step 4: on TPU v2/v3 one process runs this in a thread per core, all given this one
        # model, which prepare() moves in place: each core takes its own copy. Dropout draws from
        # the core's generator, which main()'s set_seed cannot reach before the launch: seed it
        import torch_xla.core.xla_model as xm
        model = copy.deepcopy(model)
        xm.set_rng_state(args.seed)
    optimizer = AdamW(model.parameters(), lr=args.lr)

    # step 2: prepare() puts the model and every batch on the right device (no more .to(device));
    # on several processes it also gives each one its own share of the batches and wraps the
    # model in DistributedDataParallel, which averages the gradients of all processes
    # step 4: on a TPU it does not: it moves the model to this process's XLA device, and the
    # prepared optimizer.step() averages the gradients of all devices before it steps
    train_dataloader, eval_dataloader, model, optimizer = accelerator.prepare(
        train_dataloader, eval_dataloader, model, optimizer
    )

    # the learning rate falls linearly from lr to 0 over all the training steps
    # step 2: built after prepare(), from this process's share of the batches, and not prepared:
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
            # step 2: no batch.to(device) any more: the prepared dataloader did it
            outputs = model(**batch)
            loss = outputs.loss
            # step 2: instead of loss.backward(); it also divides the loss for gradient accumulation
            # and scales it for fp16 when those are on (neither is, here)
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
    all_labels = []  # step 3: the labels travel with the predictions
    start = time.perf_counter()
    model.eval()
    for batch in eval_dataloader:
        # step 2: no batch.to(device) here either
        with torch.no_grad():
            outputs = model(**batch)
        predictions = torch.argmax(outputs.logits, dim=-1)
        # step 3: each process has only its own batches; gather them from every process
        all_predictions.append(accelerator.gather(predictions))
        all_labels.append(accelerator.gather(batch["labels"]))
    # step 3: to give every process full batches, the last ones were completed with samples
    # from the start of the dataset; they sit at the end, so keep as many as the split has.
    # (Newer code writes accelerator.gather_for_metrics(...) in the loop, which does both.)
    gathered = torch.cat(all_predictions)
    predictions = gathered[: len(raw_datasets["validation"])]
    labels = torch.cat(all_labels)[: len(raw_datasets["validation"])]
    eval_metric = metric.compute(predictions=predictions, references=labels)
    eval_seconds = time.perf_counter() - start

    results = {
        "accuracy": eval_metric["accuracy"], "f1": eval_metric["f1"],
        "eval_samples": len(predictions), "predictions": predictions.tolist(),
        # step 2: how many processes ran it, as the Accelerator counts them
        "train_losses": train_losses, "num_processes": accelerator.num_processes,
        "train_seconds": train_seconds, "eval_seconds": eval_seconds,
        "eval_gathered": len(gathered),  # step 3: "eval_gathered": how many were gathered, before the cut
    }
    # step 3: how many predictions were gathered, and how many kept
    accelerator.print(f"gathered {len(gathered)} predictions, kept {len(predictions)}")
    accelerator.print(
        f"validation: accuracy {eval_metric['accuracy']:.4f}, "
        f"f1 {eval_metric['f1']:.4f} ({len(predictions)} pairs)"
    )
    if accelerator.is_main_process:  # step 3: one process writes the results, not all of them
        path = write_metrics(args.output_dir, args, results)
        print(f"metrics written to {path}")
    # step 4: in processes notebook_launcher started, end_training() leaves the group as it is
    # (Accelerate skips it there): the launcher ends them, and the group with them
    accelerator.end_training()  # step 3: each process leaves the process group before it exits


# %%
def main():
    args = parse_args(description=__doc__)
    # step 2: launched as several processes, they join through the Accelerator
    # step 4: this script starts them itself (notebook_launcher): checked here, before it does
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
