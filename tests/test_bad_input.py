"""Bad input: one clear error line, a non-zero exit, no traceback, no metrics file, and the
earlier results left as they were.

Each case runs a step's main() in this process (sys.argv set as the command line would set
it) and catches its SystemExit: what needs no training needs no new process. One case also
runs as a real process, to check the exit code and the one line on stderr.
The table of every case, one line each, is printed at the end of the test session.
"""

import json
import runpy
import shutil
import signal
import subprocess
import sys

import pytest
from accelerate.state import AcceleratorState
from conftest import BAD_INPUT_ROWS, REPO, STEPS, offline_env, read_metrics, step_command

from common.checkpoint import EMBEDDED_CHECKPOINT

GLUE_FIXTURE = REPO / "tests" / "fixtures" / "glue_mrpc"
EARLIER = '{"accuracy": 0.5}\n'  # an earlier run's results, which must survive


def write_jsonl(folder, split, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def pairs(n=4, **change):
    return [
        dict({"sentence1": "Shares rose.", "sentence2": "Stocks rose.", "label": 1}, **change)
        if i == 2
        else {"sentence1": "Shares rose.", "sentence2": "Stocks fell.", "label": i % 2}
        for i in range(n)
    ]


def words():
    return [
        {"sentence1": "Shares rose.", "sentence2": "Stocks rose.", "label": w}
        for w in ("no", "yes", "yes", "no")
    ]


def dataset(tmp_path, train=None, validation=None):
    folder = tmp_path / "my-mrpc"
    write_jsonl(folder, "train", train or pairs())
    if validation is not False:
        write_jsonl(folder, "validation", validation or pairs())
    return ["--dataset", str(folder)]


def glue_tsv(tmp_path, header="Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", extra_row=None):
    folder = tmp_path / "glue"
    shutil.copytree(GLUE_FIXTURE, folder)
    lines = (folder / "dev.tsv").read_text().splitlines()
    lines[0] = header
    if extra_row:
        lines.append(extra_row)
    (folder / "dev.tsv").write_text("\n".join(lines) + "\n")
    return ["--dataset", str(folder)]


def checkpoint(tmp_path, without=(), tokenizer_from=None, model_type=None):
    folder = tmp_path / "my-bert"
    shutil.copytree(EMBEDDED_CHECKPOINT, folder)
    for name in without:
        (folder / name).unlink()
    if model_type:  # a config of a model without a text classification head
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(dict(config, model_type=model_type)))
    if tokenizer_from:  # a tokenizer that is not the model's own: 10 tokens for 2,048 rows
        vocab = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e"])
        (folder / "tokenizer.json").unlink()
        (folder / "vocab.txt").write_text(vocab + "\n")
    return ["--checkpoint", str(folder)]


def tokenizer_beyond_the_embeddings(tmp_path):
    """A checkpoint folder whose tokenizer is not the model's own and is bigger: the model's
    2,048 tokens after 3,000 others, so that most words get ids beyond its 2,048 embedding
    rows (without the check: IndexError, index out of range in self, at the first batch)."""
    from transformers import AutoTokenizer

    flags = checkpoint(tmp_path)
    folder = tmp_path / "my-bert"
    ids = AutoTokenizer.from_pretrained(folder).get_vocab()
    vocab = sorted(ids, key=ids.get)
    for path in folder.iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "vocab")):
            path.unlink()
    (folder / "vocab.txt").write_text(
        "\n".join(vocab[:5] + [f"filler{i}" for i in range(3000)] + vocab[5:]) + "\n"
    )
    return flags


def a_file(tmp_path):
    (tmp_path / "train.csv").write_text("sentence1,sentence2,label\n")
    return tmp_path / "train.csv"


def files(tmp_path, *names, text):
    folder = tmp_path / "data"
    folder.mkdir()
    for name in names:
        (folder / name).write_text(text)
    return ["--dataset", str(folder)]


def two_formats(tmp_path):
    """A dataset folder with train.csv and validation.jsonl."""
    flags = files(tmp_path, "train.csv", text="sentence1,sentence2,label\na,b,1\n")
    write_jsonl(tmp_path / "data", "validation", pairs())
    return flags


def cp1252(tmp_path):
    """A dataset folder whose csv files a spreadsheet saved in its Windows encoding."""
    folder = tmp_path / "data"
    folder.mkdir()
    for split in ("train", "validation"):
        (folder / f"{split}.csv").write_bytes(
            "sentence1,sentence2,label\n\u201cShares\u201d rose.,Stocks rose.,1\n".encode("cp1252")
        )
    return ["--dataset", str(folder)]


def file_as_output(tmp_path):
    (tmp_path / "taken").write_text("not a folder\n")
    return ["--output-dir", str(tmp_path / "taken")]


def metrics_folder(tmp_path):
    (tmp_path / "out" / "metrics.json").mkdir(parents=True)
    return ["--output-dir", str(tmp_path / "out")]


# name -> (kind, the flags, made from tmp_path, the words the error line must hold)
CASES = {
    "labels given as words": (
        "label",
        lambda t: dataset(t, train=words(), validation=words()),
        "train split, line 1 of train.jsonl: label 'no' is not 0 or 1",
    ),
    "a third class": (
        "label",
        lambda t: dataset(t, train=pairs(label=2)),
        "train split, line 3 of train.jsonl: label 2 is not 0 or 1",
    ),
    "a missing label": (
        "label",
        lambda t: dataset(t, train=pairs(label=None)),
        "label None is not 0 or 1",
    ),
    "a label of 1.5": (
        "label",
        lambda t: dataset(t, train=pairs(label=1.5)),
        "train split, line 3 of train.jsonl: label 1.5 is not 0 or 1",
    ),
    "an empty sentence": (
        "text",
        lambda t: dataset(t, validation=pairs(sentence2="")),
        "validation split, line 3 of validation.jsonl: sentence2 is empty",
    ),
    "a blank sentence": (
        "text",
        lambda t: dataset(t, train=pairs(sentence1="   ")),
        "train split, line 3 of train.jsonl: sentence1 is empty",
    ),
    "a missing sentence": (
        "text",
        lambda t: dataset(t, train=pairs(sentence1=None)),
        "sentence1 is empty",
    ),
    "no validation split": (
        "split",
        lambda t: dataset(t, validation=False),
        "has no validation split",
    ),
    "no label column": (
        "split",
        lambda t: dataset(
            t,
            train=[{"sentence1": "a b", "sentence2": "a c", "quality": 1}] * 3,
            validation=[{"sentence1": "a b", "sentence2": "a c", "quality": 1}] * 3,
        ),
        "lacks column(s) label",
    ),
    "neither pairs nor sentences": (
        "split",
        lambda t: dataset(
            t, train=[{"text": "a b", "label": 1}] * 3, validation=[{"text": "a b", "label": 1}] * 3
        ),
        "lacks column(s) sentence1, sentence2; the course reads sentence pairs",
    ),
    "an empty single sentence": (
        "text",
        lambda t: dataset(
            t,
            train=[{"sentence": "Shares rose.", "label": 1}, {"sentence": " ", "label": 0}],
            validation=[{"sentence": "Shares fell.", "label": 0}],
        ),
        "train split, line 2 of train.jsonl: sentence is empty; every row needs its sentence",
    ),
    "GLUE TSV with another header": (
        "format",
        lambda t: glue_tsv(t, header="a\tb\tc\td\te"),
        "dev.tsv has neither MRPC's '#1 String' and '#2 String' columns nor SST-2's 'sentence'",
    ),
    "GLUE TSV row with a missing field": (
        "format",
        lambda t: glue_tsv(t, extra_row="1\t77\tonly two"),
        "dev.tsv line 10 has 3 tab-separated fields, its header has 5",
    ),
    "GLUE TSV with a label 'yes'": (
        "format",
        lambda t: glue_tsv(t, extra_row="yes\t1\t2\tA b.\tA c."),
        "validation split, line 10 of dev.tsv: label 'yes' is not 0 or 1",
    ),
    "a folder of text files": (
        "format",
        lambda t: files(t, "train.txt", "validation.txt", text="a b\n"),
        "the train split lacks column(s) sentence1, sentence2, label",
    ),
    "a csv pandas cannot parse": (
        "format",
        lambda t: files(
            t, "train.csv", "validation.csv", text='sentence1,sentence2,label\n"a,b,1\n'
        ),
        "cannot load dataset folder <data>: Error tokenizing data. "
        "C error: EOF inside string starting at row 1",
    ),
    "train.csv beside train.jsonl": (
        "format",
        lambda t: (
            dataset(t),
            (t / "my-mrpc" / "train.csv").write_text(
                "sentence1,sentence2,label\nShares rose.,Stocks rose.,1\n"
            ),
            ["--dataset", str(t / "my-mrpc")],
        )[-1],
        "has 2 files for the train split (train.csv, train.jsonl): only one would be read",
    ),
    "splits in two formats": (
        "format",
        lambda t: two_formats(t),
        "holds its splits in several formats (train.csv, validation.jsonl)",
    ),
    "a spreadsheet's csv (cp1252)": (
        "format",
        lambda t: cp1252(t),
        "train.csv is not UTF-8 (byte 0x93 on line 2); save it as UTF-8",
    ),
    "an empty dataset folder": (
        "format",
        lambda t: (t.joinpath("empty").mkdir(), ["--dataset", str(t / "empty")])[-1],
        "cannot load dataset folder",
    ),
    "checkpoint without weights": (
        "checkpoint",
        lambda t: checkpoint(t, without=["model.safetensors"]),
        "has a config.json but no weights",
    ),
    "checkpoint without tokenizer": (
        "checkpoint",
        lambda t: checkpoint(t, without=["tokenizer.json", "tokenizer_config.json"]),
        "has no tokenizer files",
    ),
    "checkpoint with another tokenizer": (
        "checkpoint",
        lambda t: checkpoint(t, tokenizer_from=True),
        "its tokenizer has 10 tokens but the model has 2048 embedding rows",
    ),
    "checkpoint without config": (
        "checkpoint",
        lambda t: checkpoint(t, without=["config.json"]),
        "has no config.json",
    ),
    "missing checkpoint folder": (
        "checkpoint",
        lambda t: ["--checkpoint", "./no/such/folder"],
        "does not exist",
    ),
    "checkpoint is a file": (
        "checkpoint",
        lambda t: ["--checkpoint", str(a_file(t))],
        "is a file, not a folder; pass the folder that holds config.json",
    ),
    "checkpoint of an image model": (
        "checkpoint",
        lambda t: checkpoint(t, model_type="vit"),
        "its model_type is 'vit', for which transformers has no sequence-classification head",
    ),
    "dataset is a file": (
        "flag",
        lambda t: ["--dataset", str(a_file(t))],
        "is a file, not a folder; pass the folder that holds the train",
    ),
    "hub checkpoint offline": (
        "checkpoint",
        lambda t: ["--checkpoint", "bert-base-cased"],
        "cannot be reached and it is not in the local cache; leave "
        "--checkpoint out to use the embedded tiny BERT, pass a local "
        "folder saved with save_pretrained, or set HF_ENDPOINT to a Hub "
        "mirror this machine can reach",
    ),
    "output folder is a file": ("output", file_as_output, "is a file, not a folder"),
    "output folder cannot be made": (
        "output",
        lambda t: ["--output-dir", "/proc/course-run"],
        "--output-dir /proc/course-run cannot be written",
    ),
    "metrics.json is a folder": ("output", metrics_folder, "metrics.json is a folder"),
    "unknown dataset": (
        "flag",
        lambda t: ["--dataset", "no-such-dataset"],
        "unknown dataset 'no-such-dataset'",
    ),
    "hub dataset offline": (
        "flag",
        lambda t: ["--dataset", "glue"],
        "which cannot be reached; leave --dataset out to use the embedded "
        "MRPC-shaped pairs (or embedded-sst2), pass a local folder (GLUE's "
        "own train.tsv and dev.tsv too), set HF_ENDPOINT to a Hub mirror "
        "this machine can reach, or set HF_HUB_OFFLINE=1",
    ),
    "zero batch size": (
        "flag",
        lambda t: ["--train-batch-size", "0"],
        "must be a positive whole number",
    ),
    "negative eval batch size": (
        "flag",
        lambda t: ["--eval-batch-size", "-8"],
        "must be a positive whole number",
    ),
    "zero epochs": ("flag", lambda t: ["--epochs", "0"], "must be a positive whole number"),
    "zero steps": ("flag", lambda t: ["--max-train-steps", "0"], "must be a positive whole number"),
    "text learning rate": ("flag", lambda t: ["--lr", "fast"], "expected a number"),
    "zero learning rate": ("flag", lambda t: ["--lr", "0"], "must be a positive number"),
    "a negative seed": ("flag", lambda t: ["--seed", "-1"], "a seed is between 0 and 4294967295"),
    "a seed of 2**32": (
        "flag",
        lambda t: ["--seed", str(2**32)],
        "a seed is between 0 and 4294967295, got 4294967296",
    ),
    "a negative learning rate": (
        "flag",
        lambda t: ["--lr", "-5e-5"],
        "must be a positive number, got -5e-05",
    ),
    "an infinite learning rate": (
        "flag",
        lambda t: ["--lr", "inf"],
        "must be a positive number, got inf",
    ),
    "a port out of range": ("flag", lambda t: ["--port", "70000"], "a port is between 0 and 65535"),
    "a port that is no number": ("flag", lambda t: ["--port", "auto"], "expected a port number"),
    "an unknown flag": (
        "flag",
        lambda t: ["--learning-rate", "2e-5"],
        "unrecognized arguments: --learning-rate 2e-5",
    ),
}


@pytest.fixture(scope="module")
def step_modules():
    """The steps' code, loaded once (their imports take seconds), main() not called."""
    return {step: runpy.run_path(str(STEPS[step]), run_name=f"step{step}") for step in (1, 2)}


@pytest.fixture
def in_process(step_modules, monkeypatch, capsys, tmp_path):
    """Run a step's main() here with a command line; return (its SystemExit's code, or None
    when it finished, stdout, stderr)."""
    saved_hook = sys.excepthook
    saved_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def run(step, flags):
        monkeypatch.setattr(sys, "argv", [str(STEPS[step]), *map(str, flags)])
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        code = None
        try:
            step_modules[step]["main"]()
        except SystemExit as stop:
            code = stop.code
        finally:  # a run that got far installs its Ctrl-C handling and Accelerate's state
            sys.excepthook = saved_hook
            for sig, handler in saved_handlers.items():
                signal.signal(sig, handler)
            AcceleratorState._reset_state(reset_partial_state=True)
        said = capsys.readouterr()
        return code, said.out, said.err

    return run


def check_refused(code, out, err, expected):
    """The checks every bad input must pass; returns the error line."""
    assert isinstance(code, str), f"exit code {code!r}: not an error message"  # exit status 1
    lines = code.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), code
    assert expected in lines[0], lines[0]
    assert "Traceback" not in out + err
    assert not [line for line in (out + err).splitlines() if line.startswith("error")]
    return lines[0]


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_refused_in_one_line_and_loses_nothing(in_process, tmp_path, name):
    kind, make, expected = CASES[name]
    flags = make(tmp_path)
    expected = expected.replace("<data>", str(tmp_path / "data"))
    out_dir = tmp_path / "results"
    if "--output-dir" not in flags:
        out_dir.mkdir()
        (out_dir / "metrics.json").write_text(EARLIER)
        flags = [*flags, "--output-dir", str(out_dir)]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err = in_process(1, flags)
    line = check_refused(code, out, err, expected)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before, "a refused run changed or added files"  # no metrics, no temp file
    BAD_INPUT_ROWS.append((kind, name, line))


@pytest.mark.parametrize(
    "name",
    ["unknown dataset", "hub checkpoint offline", "zero batch size", "labels given as words"],
)
def test_step2_refuses_the_same(in_process, tmp_path, name):
    kind, make, expected = CASES[name]
    check_refused(
        *in_process(2, [*make(tmp_path), "--output-dir", str(tmp_path / "out")]), expected
    )
    assert not (tmp_path / "out").exists()  # not even the output folder (write_metrics makes it)


# what only a real process shows (what it prints, and what the libraries read from the
# environment when they are imported): {case: given a folder of its own and the address of a
# hub that serves nothing, (step 1's flags, its environment, the words its one error line
# must hold)}
REAL_PROCESS_CASES = {
    "a third class": lambda folder, hub: (
        CASES["a third class"][1](folder),
        {},
        CASES["a third class"][2],
    ),
    "HF_HOME is a file": lambda folder, hub: (
        [],
        {"HF_HOME": str(a_file(folder))},
        f"(from HF_HOME={folder / 'train.csv'}) cannot be used: {folder / 'train.csv'} is a "
        "file; set HF_HOME to a folder",
    ),
    "HF_DATASETS_CACHE cannot be made": lambda folder, hub: (
        [],
        {"HF_DATASETS_CACHE": "/proc/course-cache"},
        "cannot be used: No such file or directory; set HF_DATASETS_CACHE to a folder you can "
        "write to",
    ),
    # a mirror named by HF_ENDPOINT that answers, but has nothing: the libraries ask it (the
    # server below counts what), and the line names it
    "HF_ENDPOINT names a hub that serves nothing": lambda folder, hub: (
        ["--checkpoint", "bert-base-cased"],
        {"HF_ENDPOINT": hub},
        f"cannot load a tokenizer from 'bert-base-cased': We couldn't connect to '{hub}'",
    ),
}


@pytest.fixture(scope="module")
def hub_that_serves_nothing():
    """(its address, the requests it was sent): an HTTP server on 127.0.0.1 that answers 404
    to every request, as a mirror without the files would, in a thread of this process."""
    import http.server
    import threading

    requests = []

    class Nothing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(f"{self.command} {self.path}")
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Nothing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", requests
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def real_processes(tmp_path_factory, hub_that_serves_nothing):
    """{case: (the words its error line must hold, its output folder, stdout, stderr, exit
    code)}: step 1 started once per REAL_PROCESS_CASES case, the processes side by side (each
    spends its few seconds importing on one core)."""
    started = {}
    for case, given in REAL_PROCESS_CASES.items():
        folder = tmp_path_factory.mktemp("real_process")
        flags, env, expected = given(folder, hub_that_serves_nothing[0])
        started[case] = (
            expected,
            folder / "out",
            subprocess.Popen(
                step_command(1, folder / "out", *flags),
                cwd=REPO,
                env=offline_env(**env),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
    return {
        case: (expected, out_folder, *process.communicate(timeout=300), process.returncode)
        for case, (expected, out_folder, process) in started.items()
    }


def one_error_line(real_process):
    """Assert that a real process exited 1 with one `error:` line holding what its case
    expects, no traceback, and no output folder; return the line."""
    expected, out_folder, out, err, code = real_process
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert "Traceback" not in out + err
    assert not out_folder.exists()  # refused before the output folder is made
    return lines[0]


@pytest.mark.runs
def test_a_real_process_exits_with_one_line_on_stderr(real_processes):
    one_error_line(real_processes["a third class"])


@pytest.mark.runs
@pytest.mark.parametrize("setting", ["HF_HOME is a file", "HF_DATASETS_CACHE cannot be made"])
def test_a_broken_cache_setting_is_refused_in_one_line_before_anything_loads(
    real_processes, setting
):
    # a shared machine's cache variables, read by the libraries when they are imported: a
    # real process, started with them
    BAD_INPUT_ROWS.append(("cache", setting, one_error_line(real_processes[setting])))


@pytest.mark.runs
def test_hf_endpoint_sends_the_libraries_to_that_hub(real_processes, hub_that_serves_nothing):
    # HF_ENDPOINT in a real process's environment, as a student sets it for a mirror: the
    # course's reachability check and huggingface_hub (for transformers) both ask the hub it
    # names, here a server on 127.0.0.1 that has nothing; the one line names that address
    line = one_error_line(real_processes["HF_ENDPOINT names a hub that serves nothing"])
    address, requests = hub_that_serves_nothing
    assert "HEAD /bert-base-cased/resolve/main/config.json" in requests, requests
    BAD_INPUT_ROWS.append(
        (
            "checkpoint",
            "HF_ENDPOINT: a hub with nothing",
            line.replace(address, "http://127.0.0.1:<port>"),
        )
    )


def test_glue_tsv_files_load_as_they_are_and_train(in_process, tmp_path):
    # GLUE's own MRPC files: tab-separated, quotes not escaped (one sentence of the fixture
    # holds an unbalanced ")
    assert '" the builder , said' in (GLUE_FIXTURE / "train.tsv").read_text()
    from common.data import load_splits

    raw = load_splits(str(GLUE_FIXTURE))
    assert {s: raw[s].num_rows for s in raw} == {"train": 12, "validation": 8, "test": 4}
    assert raw["train"][0]["sentence1"].startswith('The mayor , whom critics called " the')
    assert raw["validation"]["label"] == [1, 0, 1, 0, 1, 0, 1, 1]
    code, out, err = in_process(
        1, ["--dataset", str(GLUE_FIXTURE), "--max-train-steps", "3", "--output-dir", str(tmp_path)]
    )
    assert code is None or code == 0, code
    metrics = read_metrics(tmp_path)
    assert len(metrics["train_losses"]) == 3 and metrics["eval_samples"] == 8


def test_labels_as_text_or_booleans_are_read_as_0_and_1_and_said_so(tmp_path, capsys):
    from common.data import load_splits

    folder = tmp_path / "csv"
    folder.mkdir()
    for split in ("train", "validation"):
        (folder / f"{split}.csv").write_text(
            "sentence1,sentence2,label\nShares rose.,Stocks rose.,true\n"
            "Shares rose.,Stocks fell.,false\n"
        )
    raw = load_splits(str(folder))
    assert raw["train"]["label"] == [1, 0]
    assert "labels given as True/False, read as 1/0" in capsys.readouterr().out


def test_a_learning_rate_above_1_gets_one_note_with_the_likely_slip(tmp_path, capsys, monkeypatch):
    # 5e5 typed for 5e-5 trains, and its loss turns NaN: a note, once per launch (rank 0)
    from common.cli import parse_args

    monkeypatch.delenv("RANK", raising=False)
    parse_args(["--lr", "5e5", "--output-dir", str(tmp_path)])
    assert capsys.readouterr().err == (
        "note: --lr 500000 is above 1: fine-tuning uses about 5e-5, and at this rate the loss "
        "will likely turn NaN (did you mean 5e-5?)\n"
    )
    monkeypatch.setenv("RANK", "1")
    parse_args(["--lr", "5e5", "--output-dir", str(tmp_path)])
    parse_args(["--lr", "1", "--output-dir", str(tmp_path)])
    assert capsys.readouterr().err == ""


@pytest.mark.runs
def test_make_course_refuses_0_processes_in_one_line_before_its_plan():
    done = subprocess.run(
        [sys.executable, "-m", "accelerate_course.run_course", "--processes", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "error: argument --processes: must be a positive whole number, got 0 (see --help)\n"
    )


def test_a_training_that_diverges_saves_and_writes_nothing_and_says_so(in_process, tmp_path):
    # --lr 5e5 for 5e-5: the loss turns NaN at the second optimizer step (measured here), and
    # the run stops there, out of 50; the earlier model and metrics.json stay as they were
    out = tmp_path / "results"
    (out / "model").mkdir(parents=True)
    (out / "model" / "config.json").write_text("{}")
    (out / "metrics.json").write_text(EARLIER)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out_text, err = in_process(
        1, ["--lr", "5e5", "--max-train-steps", "50", "--output-dir", str(out)]
    )
    line = check_refused(
        code,
        out_text,
        err,
        "the loss of optimizer step 2 is nan: the training "
        "diverged, and nothing was saved; likely: --lr 500000 is far above "
        "fine-tuning's usual 5e-5",
    )
    assert "| 2/50 [" in err and "| 3/50 [" not in err  # the progress bar: 2 steps of 50
    assert "note: --lr 500000 is above 1" in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    BAD_INPUT_ROWS.append(("training", "--lr 5e5 (for 5e-5)", line))


def test_metrics_json_is_strict_json_or_not_written(tmp_path):
    # a NaN (a student's loop that saves no model, or a loss of their own) is named, with
    # where it is, and nothing is written: json.dump would write NaN, which JSON has not
    import types

    from common.output import write_metrics

    args = types.SimpleNamespace(lr=5e5, checkpoint="embedded")
    (tmp_path / "metrics.json").write_text(EARLIER)
    with pytest.raises(SystemExit) as stop:
        write_metrics(tmp_path, args, {"accuracy": 0.5, "train_losses": [0.7, float("nan")]})
    assert stop.value.code == (
        "error: train_losses[1] (nan, the loss of optimizer step 2) is not a number: the "
        "training diverged, and no metrics.json was written; likely: --lr 500000 is far above "
        "fine-tuning's usual 5e-5"
    )
    assert (tmp_path / "metrics.json").read_text() == EARLIER
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def half_downloaded(tmp_path):
    """A checkpoint folder whose model.safetensors stopped half way."""
    flags = checkpoint(tmp_path)
    weights = tmp_path / "my-bert" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return flags


def sharded_with_one_missing(tmp_path):
    """A checkpoint folder saved in 2 shards (save_pretrained's max_shard_size), the second
    one not downloaded."""
    from transformers import AutoModelForSequenceClassification

    folder = tmp_path / "my-bert"
    shutil.copytree(EMBEDDED_CHECKPOINT, folder)
    (folder / "model.safetensors").unlink()
    model = AutoModelForSequenceClassification.from_pretrained(EMBEDDED_CHECKPOINT, num_labels=2)
    model.save_pretrained(folder, max_shard_size="300KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) >= 2, shards
    shards[-1].unlink()
    return ["--checkpoint", str(folder)]


def float16(tmp_path, dtype="float16"):
    """A checkpoint folder saved in float16 (model.half().save_pretrained): its config says
    so, which is what transformers loads it by."""
    flags = checkpoint(tmp_path)
    config = json.loads((tmp_path / "my-bert" / "config.json").read_text())
    (tmp_path / "my-bert" / "config.json").write_text(json.dumps(dict(config, dtype=dtype)))
    return flags


def bfloat16(tmp_path):
    """A checkpoint folder saved in bfloat16."""
    return float16(tmp_path, "bfloat16")


def three_labels(tmp_path):
    """A checkpoint folder fine-tuned for 3 labels: its head saved with 3 rows."""
    from transformers import AutoModelForSequenceClassification

    folder = tmp_path / "my-bert"
    shutil.copytree(EMBEDDED_CHECKPOINT, folder)
    AutoModelForSequenceClassification.from_pretrained(
        EMBEDDED_CHECKPOINT, num_labels=3
    ).save_pretrained(folder)
    return ["--checkpoint", str(folder)]


CASES.update(
    {
        "a head for 3 labels": (
            "checkpoint",
            three_labels,
            "holds a classification head for 3 labels (classifier.weight), "
            "and MRPC has 2: save its encoder alone",
        ),
        "a tokenizer beyond the embeddings": (
            "checkpoint",
            tokenizer_beyond_the_embeddings,
            "its tokenizer has 5048 tokens but the model has "
            "2048 embedding rows, so they do not belong together",
        ),
        "a float16 checkpoint": (
            "checkpoint",
            float16,
            "holds float16 weights (its config.json's "
            "dtype), which transformers loads and the steps train as they are, "
            "and a float16 training without loss scaling turns NaN",
        ),
        "a bfloat16 checkpoint": (
            "checkpoint",
            bfloat16,
            "holds bfloat16 weights (its config.json's "
            "dtype), which transformers loads and the steps train as they "
            "are, and in bfloat16 most of the optimizer's small updates are "
            "rounded away; save a float32 copy",
        ),
        "a weights file cut short": (
            "checkpoint",
            half_downloaded,
            "model.safetensors cannot be read (Error while deserializing "
            "header: incomplete metadata, file not fully covered); it is "
            "likely cut short: download or copy it again",
        ),
        "a sharded checkpoint, a shard missing": (
            "checkpoint",
            sharded_with_one_missing,
            "model.safetensors.index.json names",
        ),
    }
)
