"""The settings of the environment that an Accelerator reads and that change a run's numbers:
named in one line each when a step starts, and written into metrics.json."""

import os

# environment variables an Accelerator reads when it is made, which change what a step
# computes, with the value that changes nothing (accelerate 1.15.0: state.py and
# accelerator.py; accelerate launch sets the first ones from its config file, to these values
# unless the file says otherwise): step 1 never reads them, steps 2 to 4 do
NEUTRAL = {
    "ACCELERATE_MIXED_PRECISION": "no",
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "1",
    "ACCELERATE_DYNAMO_BACKEND": "no",
    "ACCELERATE_USE_DEEPSPEED": "false",
    "ACCELERATE_USE_FSDP": "false",
    "ACCELERATE_USE_MEGATRON_LM": "false",
}


def settings_that_change_the_numbers() -> dict:
    """Return {name: value} of the NEUTRAL variables set here to another value."""
    return {
        name: os.environ[name]
        for name, neutral in NEUTRAL.items()
        if os.environ.get(name, "").strip().lower() not in ("", neutral)
    }


def say_settings(on_cpu: bool) -> None:
    """Print one note per setting of the environment that changes this run's numbers (on the
    main process): a run that silently computes something else looks like a wrong lesson."""
    if os.environ.get("RANK", "0") != "0":
        return
    for name, value in settings_that_change_the_numbers().items():
        if name == "ACCELERATE_MIXED_PRECISION" and value.lower() == "fp16" and on_cpu:
            effect = (
                ", but on a CPU Accelerate uses no fp16 (no autocast, no loss scaling): "
                "this run is in fp32"
            )
        else:
            effect = (
                ": Accelerate reads it, so this run's numbers differ from a run without "
                "it (step 1 never reads it)"
            )
        print(
            f"note: {name}={value} is set in this environment{effect}; unset {name} for "
            "the course's own numbers",
            flush=True,
        )
