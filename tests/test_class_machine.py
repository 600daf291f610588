"""A class's machine as it is: an `accelerate config` file in the student's Hugging Face cache
(Accelerate's docs tell everyone to run `accelerate config`), and port 29500 held by another
user (for the whole test session: conftest.port_29500_taken). The course's launches, as the
README prints them, run the same and give the same numbers.
"""

import sys

import pytest
from conftest import STEPS, port_is_taken, read_metrics, run_command

from accelerate_course.lab_runs import SHORT_RUN

# what a student's `accelerate config` may have written: FSDP, debug mode, bf16, 4 processes
HOSTILE_CONFIG = """\
compute_environment: LOCAL_MACHINE
debug: true
distributed_type: FSDP
downcast_bf16: 'no'
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 4
rdzv_backend: static
same_network: true
use_cpu: false
"""
# prints what a launch left in its process's environment
PROBE = """\
import os
print("probe", os.environ.get("ACCELERATE_USE_FSDP"), os.environ.get("ACCELERATE_DEBUG_MODE"),
      os.environ.get("ACCELERATE_MIXED_PRECISION"), flush=True)
"""


@pytest.fixture(scope="module")
def crowded(tmp_path_factory):
    """The environment of a crowded machine: HF_HOME holds the hostile default config (and
    29500 is held: conftest.port_29500_taken)."""
    home = tmp_path_factory.mktemp("hf_home")
    (home / "accelerate").mkdir()
    (home / "accelerate" / "default_config.yaml").write_text(HOSTILE_CONFIG)
    assert port_is_taken(29500)
    return {"HF_HOME": str(home)}


def launch(words, tmp_path, timeout=600, **env):
    """Run a command from the repository root on the crowded machine; return its output."""
    result = run_command(words, timeout, **env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result.stdout + result.stderr


def accelerate(*words):
    return [sys.executable, "-m", "accelerate.commands.launch", *map(str, words)]


@pytest.mark.runs
def test_the_default_config_takes_over_a_launch_that_gives_every_flag(tmp_path, crowded):
    # the control: what the README printed before the course's config files, every setting
    # on the command line, is turned into an FSDP run in debug mode by the default config
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    said = launch(
        accelerate(
            "--num_processes",
            1,
            "--num_machines",
            1,
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            probe,
        ),
        tmp_path,
        **crowded,
    )
    assert "probe true true no" in said
    said = launch(accelerate("--config_file", "configs/1-process.yaml", probe), tmp_path, **crowded)
    assert "probe None None no" in said  # with the course's file: none of it


def test_step2_with_the_course_config_is_the_same_run_on_a_crowded_machine(
    tmp_path, crowded, lab_runs
):
    launch(
        accelerate(
            "--config_file",
            "configs/1-process.yaml",
            STEPS[2],
            *SHORT_RUN,
            "--output-dir",
            tmp_path,
        ),
        tmp_path,
        **crowded,
    )
    run, reference = read_metrics(tmp_path), lab_runs(2).one["lesson"]
    assert run["num_processes"] == 1
    assert run["train_losses"] == reference.losses
    assert run["predictions"] == reference.predictions


@pytest.mark.step3
def test_step3_readme_command_is_the_same_run_on_a_crowded_machine(tmp_path, crowded, lab_runs):
    said = launch(
        accelerate(
            "--config_file",
            "configs/cpu-2-processes.yaml",
            STEPS[3],
            *SHORT_RUN,
            "--output-dir",
            tmp_path,
        ),
        tmp_path,
        ACCELERATE_USE_CPU="1",
        **crowded,
    )
    assert "Num processes: 2" in said and "Backend: gloo" in said  # from inside the processes
    run, reference = read_metrics(tmp_path), lab_runs(3)["lesson"]
    assert run["num_processes"] == 2 and run["eval_gathered"] == 416
    assert run["train_losses"] == reference.losses
    assert run["predictions"] == reference.predictions


@pytest.mark.step4
def test_step4_runs_while_29500_is_held(lab_runs):
    # notebook_launcher's default port is 29500, held during the whole session; step 4
    # passes it a free one: the lab's run of step 4 (python step4_tpu_notebook/train.py
    # --num-processes 2) joined its two processes
    assert port_is_taken(29500)
    runs = lab_runs(4)
    run = runs["lesson"]
    assert run.error is None
    assert "Num processes: 2" in (runs.folder / "runs" / "lesson" / "rank0.out").read_text()
    assert run.accelerator_processes == 2 and run.gathered == 416
    assert len(run.predictions) == 408


def test_a_mac_with_apple_silicon_gets_a_plan_that_says_mps():
    # steps 1 and 2 pick mps by themselves (cuda, else mps, else cpu); the plan says so, and
    # steps 3 and 4 run on CPU processes, as without a GPU (not run here: no Mac)
    from accelerate_course.commands import course_commands

    planned = course_commands(0, mps=True)
    assert planned[1].where == planned[2].where == "1 process on Apple's GPU (mps)"
    assert planned[3].where.startswith("2 processes on the CPU (gloo)")
    assert planned[3].env["ACCELERATE_USE_CPU"] == "1"
    assert course_commands(0)[1].where == "1 process on the CPU"


@pytest.mark.runs
def test_native_windows_is_sent_to_wsl_in_one_line(monkeypatch, tmp_path):
    # the runner (the Makefile's own lines on Windows: tests/test_windows_make.py): one error
    # line, no traceback, nothing run
    from accelerate_course import run_course

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(sys, "argv", ["run_course.py", "--output-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        run_course.main()
    assert str(stop.value).startswith(
        "error: make course runs steps 3 and 4 on several processes"
    ) and "wsl --install" in str(stop.value)
    assert not list(tmp_path.iterdir())
