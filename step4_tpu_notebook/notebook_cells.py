# %% [markdown]
# # Launching training on TPU cores with 🤗 Accelerate
#
# The last step of the course, as a notebook: fine-tune a BERT-style classifier on GLUE MRPC
# (is sentence 2 a paraphrase of sentence 1?) with the loop of step 3, started by
# `notebook_launcher` on every TPU core of a Colab or Kaggle runtime, or on the processes of
# a laptop CPU. It follows Accelerate's "simple NLP example" TPU notebook.
#
# The code cells of the training itself are `step4_tpu_notebook/train.py`'s own cells, copied
# here by `python tools/build_notebook.py` (a test fails when they differ). This notebook
# runs top to bottom on a laptop CPU with the course's embedded tiny BERT in about a minute.

# %% [markdown]
# ## Install
#
# On a laptop, run the notebook from the course's virtual environment (`make install`, then
# `.venv/bin/jupyter notebook` or pick `.venv` as the kernel) and skip this cell.
#
# On a **Colab or Kaggle TPU runtime**, uncomment and run it first. torch and torch_xla must be
# the same release (2.9.0 is torch_xla's latest); with any other torch, `import torch_xla` fails
# and Accelerate silently falls back to the CPU. Then restart the runtime.

# %%
# !pip install torch==2.9.0 'torch_xla[tpu]==2.9.0' -f https://storage.googleapis.com/libtpu-releases/index.html
# !pip install transformers datasets accelerate evaluate scikit-learn
# !git clone <your copy of this course> course && pip install --no-deps -e course
# import os; os.chdir("course")

# %% [markdown]
# ## The imports and the command line
#
# `train.py`'s first cells: its docstring and its imports.

# %%
# train.py: cell 0

# %%
# train.py: cell 1

# %% [markdown]
# ## Load the data
#
# The course's embedded MRPC-shaped pairs (`"glue"` loads the real GLUE MRPC from the
# Hugging Face Hub, a folder loads your own files). Three splits, with `sentence1`,
# `sentence2`, `label` (1 = paraphrase) and `idx`. A few random pairs:

# %%
import pandas as pd

raw_datasets = load_mrpc("embedded")
print(raw_datasets)
examples = raw_datasets["train"].shuffle(seed=0).select(range(6))
pd.DataFrame(examples)[["sentence1", "sentence2", "label"]].style.set_properties(
    **{"text-align": "left"})

# %% [markdown]
# ## Preprocess
#
# The tokenizer turns a pair into one sequence, `[CLS] sentence1 [SEP] sentence2 [SEP]`,
# with `token_type_ids` telling the two sentences apart:

# %%
tokenizer = load_tokenizer(resolve_checkpoint("embedded"))
pair = tokenizer(raw_datasets["train"][0]["sentence1"], raw_datasets["train"][0]["sentence2"])
print(tokenizer.decode(pair["input_ids"]))
print(pair)

# %% [markdown]
# `common/data.py` tokenizes every pair, keeps only the columns the model accepts
# (`input_ids`, `token_type_ids`, `attention_mask`, and `labels`, renamed from `label`), and
# wraps the splits in dataloaders. For TPUs every batch is padded to the same length, 128:

# %%
train_dataloader, eval_dataloader = get_dataloaders(raw_datasets, tokenizer, 8, 8,
                                                    pad_to_max_length=128)
batch = next(iter(train_dataloader))
print({name: tuple(tensor.shape) for name, tensor in batch.items()})

# %% [markdown]
# ## A first look at the model
#
# ⚠️ **On a TPU, do not run the next cell before the launch.** It runs the model once, which
# on a TPU runtime starts the TPU in this notebook's process, and the launch below then cannot
# start its own processes on the TPU cores (you would have to restart the runtime). On a CPU or
# GPU machine it is harmless: set `FIRST_LOOK = True` to see the model's output for one batch.

# %%
FIRST_LOOK = False
if FIRST_LOOK:
    first_look = AutoModelForSequenceClassification.from_pretrained(
        resolve_checkpoint("embedded"), num_labels=2)
    outputs = first_look(**batch)
    print(outputs.loss, outputs.logits.shape)

# %% [markdown]
# ## The metric
#
# GLUE MRPC reports accuracy and F1 (of the paraphrase class). With its new, untrained head
# the model guesses; the training below should do much better than this, and better than
# always answering "paraphrase" (68 % of the validation pairs):

# %%
metric = evaluate.load(GLUE_MRPC_METRIC)
set_seed(42)
untrained = AutoModelForSequenceClassification.from_pretrained(
    resolve_checkpoint("embedded"), num_labels=2).eval()
with torch.no_grad():
    for batch in eval_dataloader:
        predictions = untrained(**batch).logits.argmax(dim=-1)
        metric.add_batch(predictions=predictions, references=batch["labels"])
print("untrained head:", metric.compute())
print("always 'paraphrase':", metric.compute(
    predictions=[1] * len(raw_datasets["validation"]), references=raw_datasets["validation"]["label"]))

# %% [markdown]
# ## Fine-tuning: the training function
#
# Everything from the `Accelerator` to the final metric lives in one function, because
# `notebook_launcher` runs a *function* on every process (every TPU core):
#
# - **The `Accelerator` is created inside it.** The `Accelerator` decides, once per process,
#   which device and which process it is. Created in a cell of the notebook, it would settle
#   that for the notebook's single process before the launch; Accelerate refuses to launch
#   then ("the `Accelerator` should only be initialized inside your training function").
# - **The model is created outside it**, once, and passed in. On a TPU the launched processes
#   are forks of the notebook and share this one copy in memory; created inside, every core
#   would load its own copy, which exhausts a Colab's memory with a real model.
# - **Every batch has the same shape.** XLA compiles the computation graph for the shapes it
#   sees; dynamic padding gives a new sequence length almost every batch, and each new length
#   costs a new compilation. Padding every pair to 128 tokens compiles once.
#
# With no GPU or TPU, `Accelerator(cpu=True)` makes the launched processes one group on the
# CPU; without it, each would train alone on its own data.

# %%
# train.py: cell 2

# %% [markdown]
# ## The launch
#
# `main()` reads the course's settings (in a notebook: the defaults, or the environment
# variable `COURSE_ARGS`, e.g. `--max-train-steps 20`), creates the model once, and calls
# `notebook_launcher(training_function, (model, args), num_processes=2)`. On a Colab or Kaggle
# TPU, Accelerate ignores `num_processes` and starts one process per TPU core.

# %%
# train.py: cell 3

# %% [markdown]
# The results are in `outputs/metrics.json`. On a laptop CPU, 2 processes each see half of the
# batches, so training takes 690 optimizer steps of 2 × 8 pairs; the table in the course's
# README compares this run with steps 1 to 3.
