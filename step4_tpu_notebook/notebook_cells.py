# %% [markdown]
# # Launching training on TPU cores with 🤗 Accelerate
#
# links: written by accelerate_course/maintain/build_notebook.py
#
# The last step of the course, as a notebook: fine-tune a BERT-style classifier on GLUE MRPC
# (is sentence 2 a paraphrase of sentence 1?) with the loop of step 3, started by
# `notebook_launcher` on every TPU chip of a Colab or Kaggle TPU runtime, or on 2 processes of
# a laptop's CPU. It follows Accelerate's "simple NLP example" TPU notebook.
#
# The training cells are `step4_tpu_notebook/train.py`'s own cells, copied here by
# `python -m accelerate_course.maintain.build_notebook` (a test fails when they differ).

# %% [markdown]
# ## Setup
#
# Run the next cell first. It installs the course and what this runtime lacks, and says, in
# one `setup:` line per decision, what it kept and what it installed ([its answer for each
# runtime](DOCS/notebook-setup.md)):
# - **in the course's folder** (a laptop, after `make install`, with the `.venv` kernel): it
#   finds everything already there and changes nothing;
# - **on Colab or Kaggle**: it keeps the runtime's torch (on a TPU runtime, its torch and
#   torch_xla of one release), installs the course's versions of the Hugging Face libraries,
#   and the course itself from `COURSE_SOURCE` (the package `common`, with the embedded tiny
#   BERT and data: the notebook runs offline there too). If it upgraded a package this kernel
#   had already loaded, it asks you to restart the runtime and run the notebook again; where
#   it cannot go on, it says why in one line and stops there;
# - **with a TPU attached**: it says how many chips it found, and sets nothing. In Colab or
#   Kaggle, `notebook_launcher` takes its TPU branch when `PJRT_DEVICE=TPU` is set. Importing
#   accelerate (the next cell) imports torch_xla, and torch_xla sets `PJRT_DEVICE=TPU` itself
#   when it finds libtpu and a TPU chip (read in torch_xla's source, not run on a TPU).

# %%
# setup: written by accelerate_course/maintain/build_notebook.py

# %% [markdown]
# ## The imports
#
# `train.py`'s first cells: its docstring and its imports.

# %%
# train.py: cell 0

# %%
# train.py: cell 1

# %% [markdown]
# ## The settings
#
# Tweak anything you like in here: the launch below reads these settings (`main()` parses
# them, as the course's scripts parse their command line), and so do the cells before it.
# `"checkpoint": "bert-base-cased", "dataset": "glue"` is the course's real setup, from the
# Hugging Face Hub; `"dataset": "embedded-sst2"` a single-sentence task (SST-2-shaped);
# `"max_train_steps": 50` a run of a few minutes (its numbers are then those of a barely
# trained model). Any other flag of the scripts can go in here too (`"output_dir":
# "outputs/run1"`); flags in the environment variable `COURSE_ARGS` come after these, and win.

# %%
hyperparameters = {
    "lr": 5e-5,
    "epochs": 3,
    "train_batch_size": 8,  # per process
    "eval_batch_size": 8,  # per process
    "seed": 42,
    "checkpoint": "embedded",
    "dataset": "embedded",
    "num_processes": 2,  # on a CPU or GPUs; on a TPU, one process per chip whatever this says
    "max_train_steps": None,  # a number: stop after that many optimizer steps
}
args = parse_args(settings=hyperparameters)  # main() below parses them again
print(args)

# %% [markdown]
# ## The TPU rules, and the training function
#
# Everything from the `Accelerator` to the final metric lives in one function, because
# `notebook_launcher` runs a *function* in every process (one per TPU chip; on TPU v2 and
# v3, whose chips have two cores, one thread per core inside it):
#
# - **On a TPU, each core takes its own copy of the model and seeds its own generator.** On
#   TPU v2 and v3 the threads of one process all receive the one model object, and
#   `prepare()` moves the model it is given to its core in place: without a copy, one core
#   would train the weights another core moved (accelerate issue #3126). Each process makes
#   its copy in host memory: 8 copies on a Kaggle v5e-8, one per chip. Dropout on the TPU
#   draws from the core's random generator, which transformers' `set_seed` in `main()` does
#   not seed. Accelerate's `accelerate.utils.set_seed` does (`xm.set_rng_state`), but in
#   `main()` it would start the TPU runtime before the launch, and in the function it would
#   seed again the CPU generators `main()` seeded for the head and the batches' order: the
#   function seeds the core's generator alone, from `--seed`, with set_seed's own call.
# - **The `Accelerator` is created inside it.** Each process sets up its own. If the
#   notebook has already created one, `notebook_launcher` refuses to launch on a TPU and on
#   several processes ("the `Accelerator` should only be initialized inside your training
#   function"): restart the runtime. (On the branches that run the function in this process,
#   a CPU or one GPU in Colab, or `"num_processes": 1`, it does not check.) After such a run in
#   this process, the kernel keeps Accelerate's state: a later launch of several processes
#   refuses with the same line until you restart the runtime.
# - **The model is created outside it**, once, in `main()`, and passed in: it is loaded (or
#   downloaded) once, its new head gets its random weights from one seed, and every process
#   starts from that copy. Keep it on the CPU until the launch: torch_xla refuses to start
#   its processes once this notebook has used the TPU ("Runtime is already initialized. Do
#   not use the XLA device before calling xmp.spawn."). The cells that look closer at the
#   data and the model come after the launch, on the CPU.
# - **Every batch has the same shape, almost.** XLA compiles the computation for the shapes
#   it sees; dynamic padding gives a new sequence length almost every batch, and each new
#   length costs a new compilation. Padding every pair to 128 tokens leaves one more shape on
#   one device (a Colab TPU v5e-1): the epoch's last batch, of the 3,668 % 8 = 4 pairs left
#   (measured on torch_xla's CPU backend: COMPILES). On several chips Accelerate completes
#   the last round with pairs from the start, so every batch is full.
# - **No `.item()` at every step.** Reading a value from the TPU makes the host wait for it;
#   the losses stay on the device and are read once, after training.
#
# With no GPU or TPU, `Accelerator(cpu=True)` makes the launched processes one group on the
# CPU; without it, each would train alone on all the data. The condition sends a Mac with
# Apple silicon to the CPU too: its GPU (mps) is neither CUDA nor XLA.

# %%
# train.py: cell 2

# %% [markdown]
# ## The launch
#
# `main()` reads the settings, creates the model once, and calls
# `notebook_launcher(training_function, (model, args), num_processes=args.num_processes)`.
# What it prints tells you where it runs:
# - on a Colab TPU (v5e-1, or v6e-1 with Colab Pro) or a Kaggle TPU (v5e-8): **`Launching a
#   training on TPU cores.`**, then `Distributed environment: DistributedType.XLA`, one
#   process per TPU chip (1 on Colab, 8 on Kaggle; `num_processes` is ignored there). If you
#   see anything else, the TPU branch was not taken: check that the setup cell found the TPU
#   (`PJRT_DEVICE=TPU`);
# - on a CPU (a laptop, this copy): `Launching training on 2 CUDAs.` (Accelerate names CUDA
#   for any machine without another accelerator), a warning from each process that
#   `OMP_NUM_THREADS` was unset and Accelerate set its threads (the physical cores divided by
#   the processes: 1 on this copy's 2 cores), then `MULTI_CPU  Backend: gloo`, `Num
#   processes: 2`;
# - on Colab without a TPU, with a CPU or one GPU (T4): `Launching training on one CPU.` or
#   `on one GPU.`, and the function runs once, in this notebook's process, whatever
#   `num_processes` says: `DistributedType.NO`, one process that takes every batch, 1,377
#   optimizer steps instead of 690. The kernel then keeps Accelerate's state (above);
# - on Kaggle with two GPUs (T4 x2, Kaggle's GPU runtime): `DistributedType.MULTI_GPU`, one
#   process per GPU (nccl);
# - on a machine with one GPU and 2 processes asked for: one `error:` line, and nothing runs:
#   two processes cannot share one GPU. `"num_processes": 1` trains in one process on the GPU;
#   for 2 processes on the CPU, restart the kernel and run `os.environ["CUDA_VISIBLE_DEVICES"]
#   = ""` in its first cell (the line says both). The course changes nothing in this kernel.
#
# (The TPU lines are read in Accelerate's sources and simulated here, not run on a TPU. Of
# the GPU lines, one NVIDIA H200 ran step 4's script with one process on the GPU; the others
# are simulated: `docs/gpu.md`.)

# %%
# train.py: cell 3

# %% [markdown]
# ## The results
#
# The launch wrote them to `<output-dir>/metrics.json`: accuracy, F1, every prediction and
# every training loss. On a laptop's CPU, 2 processes each take half of every epoch's
# batches, so training takes 690 optimizer steps of 2 × 8 pairs.

# %%
import json
from pathlib import Path

results = json.loads((Path(args.output_dir) / "metrics.json").read_text())
print({key: results[key] for key in ("accuracy", "f1", "eval_samples", "num_processes")})
print(
    f"{len(results['train_losses'])} optimizer steps, training loss "
    f"{results['train_losses'][0]:.3f} -> {results['train_losses'][-1]:.3f}"
)

# %% [markdown]
# ## Looking closer (optional)
#
# The lesson ends above. These cells look at what it trained on, on the CPU.
#
# ### The data
#
# Three splits, with `sentence1`, `sentence2`, `label` (1 = paraphrase) and `idx`. A few
# random pairs:

# %%
import pandas as pd

raw_datasets = load_splits(args.dataset)
print(raw_datasets)
examples = raw_datasets["train"].shuffle(seed=0).select(range(6))
pd.DataFrame(examples).drop(columns="idx", errors="ignore").style.set_properties(
    **{"text-align": "left"}
)

# %% [markdown]
# ### Preprocess
#
# The tokenizer turns a pair into one sequence, `[CLS] sentence1 [SEP] sentence2 [SEP]`,
# with `token_type_ids` telling the two sentences apart:

# %%
from common.data import text_columns

tokenizer = load_tokenizer(resolve_checkpoint(args.checkpoint))
first = raw_datasets["train"][0]
pair = tokenizer(*(first[column] for column in text_columns(raw_datasets["train"])))
print(tokenizer.decode(pair["input_ids"]))
print(pair)

# %% [markdown]
# `common/data.py` tokenizes every pair, keeps only the columns the model accepts
# (`input_ids`, `token_type_ids`, `attention_mask`, and `labels`, renamed from `label`), and
# wraps the splits in dataloaders. For TPUs every batch is padded to the same length, 128:

# %%
train_dataloader, eval_dataloader = get_dataloaders(
    raw_datasets, tokenizer, args, pad_to_max_length=128
)
batch = next(iter(train_dataloader))
print({name: tuple(tensor.shape) for name, tensor in batch.items()})

# %% [markdown]
# ### The model, untrained
#
# The pretrained encoder with a new, untrained two-class head, on the CPU. transformers'
# load report lists the pretraining heads' weights as UNEXPECTED: the classifier does not
# use them. It lists the new head's as MISSING: newly initialized, as they should be.

# %%
set_seed(args.seed)
untrained = AutoModelForSequenceClassification.from_pretrained(
    resolve_checkpoint(args.checkpoint), num_labels=2
)
untrained.config.pad_token_id = tokenizer.pad_token_id
outputs = untrained(**batch)
print(outputs.loss, outputs.logits.shape)

# %% [markdown]
# ### The metric
#
# GLUE MRPC reports accuracy and F1 (of the paraphrase class). With its untrained head the
# model guesses. Always answering "paraphrase" (the majority class) is the mark to beat; the
# last line says whether the training above beat it:

# %%
metric = evaluate.load(GLUE_MRPC_METRIC)
untrained.eval()
with torch.no_grad():
    for batch in eval_dataloader:
        predictions = untrained(**batch).logits.argmax(dim=-1)
        metric.add_batch(predictions=predictions, references=batch["labels"])
print("untrained head:", metric.compute())
labels = raw_datasets["validation"]["label"]
always = metric.compute(predictions=[1] * len(labels), references=labels)
print("always 'paraphrase':", always)
beat = "beat" if results["accuracy"] > always["accuracy"] else "did not beat"
print(
    f"the training's accuracy, {results['accuracy']:.4f}, {beat} always 'paraphrase' "
    f"({always['accuracy']:.4f})"
)
