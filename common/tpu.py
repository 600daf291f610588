"""Is a TPU attached? The test torch_xla itself makes, in one small function.

The notebook's setup cell (which runs before the course is installed, so it carries this
function's own source, put there by accelerate_course/maintain/build_notebook.py) and the course
runner both use it. A Google PCI vendor id alone is not a TPU: Google's gVNIC network card on
a GCE virtual machine has the same vendor, 0x1ae0; torch_xla also requires a TPU device id
(torch_xla 2.9.0, _internal/tpu.py, _TPU_PCI_DEVICE_IDS and num_available_chips).
"""


def tpu_chips(devices="/sys/bus/pci/devices"):
    """Return the TPU chips on this machine's PCI bus, as a list of names ('v2/v3', 'v4',
    'v5e', 'v6e', ...), one per chip: the devices whose vendor is Google's (0x1ae0) and
    whose device id is one torch_xla 2.9.0 counts as a TPU chip. [] when there is none (or
    no such folder: not Linux)."""
    import glob
    import os

    names = {
        "0x0027": "v2/v3",
        "0x005e": "v4",
        "0x0063": "v5e",
        "0x006f": "v6e",
        "0x0062": "v5p",
        "0x0056": "(testing)",
        "0x0076": "7x",
    }
    chips = []
    for vendor in sorted(glob.glob(os.path.join(devices, "*", "vendor"))):
        try:
            with open(vendor) as f:
                if f.read().strip() != "0x1ae0":
                    continue
            with open(os.path.join(os.path.dirname(vendor), "device")) as f:
                device_id = f.read().strip()
        except OSError:
            continue
        if device_id in names:
            chips.append(names[device_id])
    return chips
