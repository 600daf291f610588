"""Is a TPU attached? common/tpu.py's tpu_chips against fake PCI trees (/sys/bus/pci/devices),
the test torch_xla 2.9.0 makes (vendor 0x1ae0 and a TPU device id), used by the course
runner and, as its own source, by the notebook's setup cell."""

import pytest

from common.tpu import tpu_chips

INTEL_NIC = ("0x8086", "0x1592")
NVIDIA_T4 = ("0x10de", "0x1eb8")
GVNIC = ("0x1ae0", "0x0042")  # Google's virtual network card on GCE: Google's vendor id


def fake_pci(root, *devices):
    """Write a PCI device tree: one folder per device with its vendor and device files."""
    for i, (vendor, device) in enumerate(devices):
        folder = root / f"0000:00:{i:02x}.0"
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(vendor + "\n")
        (folder / "device").write_text(device + "\n")
    return str(root)


@pytest.mark.parametrize(
    "machine,devices,chips",
    [
        (
            "Colab or Kaggle TPU v2-8/v3-8: 4 chips",
            [INTEL_NIC] + [("0x1ae0", "0x0027")] * 4,
            ["v2/v3"] * 4,
        ),
        ("TPU v4-8 VM: 4 chips", [GVNIC] + [("0x1ae0", "0x005e")] * 4, ["v4"] * 4),
        ("Kaggle TPU v5e-8: 8 chips", [GVNIC] + [("0x1ae0", "0x0063")] * 8, ["v5e"] * 8),
        ("TPU v6e-1: 1 chip", [GVNIC, ("0x1ae0", "0x006f")], ["v6e"]),
        ("a GCE VM with a gVNIC card and a T4: no TPU", [GVNIC, NVIDIA_T4], []),
        ("a gVNIC card alone: no TPU", [GVNIC], []),
        ("a laptop", [INTEL_NIC], []),
        ("nothing on the bus", [], []),
    ],
)
def test_tpu_chips_are_found_as_torch_xla_finds_them(tmp_path, machine, devices, chips):
    assert tpu_chips(fake_pci(tmp_path / "devices", *devices)) == chips, machine


def test_no_pci_folder_means_no_tpu(tmp_path):
    assert tpu_chips(str(tmp_path / "absent")) == []  # macOS, Windows


@pytest.mark.runs  # the cell names the course's source, which asks git
def test_the_notebooks_setup_uses_the_same_function():
    # the setup cell installs the course, then calls common.notebook_setup.set_up, which asks
    # common.tpu.tpu_chips: one definition, no copy of it pasted into the cell
    from accelerate_course.maintain.build_notebook import setup_cell
    from common import notebook_setup

    assert "def tpu_chips" not in setup_cell() and "set_up(" in setup_cell()
    assert notebook_setup.tpu_chips is tpu_chips
