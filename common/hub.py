"""Whether the Hugging Face Hub can be reached, asked quickly before a hub download, and which
hub that is.

Without this check an offline machine spends a minute in retries and prints a page of
warnings before it fails. The hub is huggingface_hub's ENDPOINT: https://huggingface.co, or
the address HF_ENDPOINT names (a mirror or a private Hub), read when huggingface_hub is
imported; transformers and datasets download from the same address.
"""

import socket
from urllib.parse import urlparse

from huggingface_hub import constants


def hub_out_of_reach():
    """Return True if a hub download would only fail: the hub cannot be reached, and the user
    did not ask for offline mode (HF_HUB_OFFLINE=1, the cache only, no download tried)."""
    return not constants.HF_HUB_OFFLINE and not hub_reachable()


def hub_reachable(timeout=3.0):
    """Return True if a TCP connection to the hub's host (HF_ENDPOINT) opens within timeout."""
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def hub_address():
    """Return the hub's address for an error line: "https://huggingface.co", or the address
    HF_ENDPOINT set, saying so ("http://127.0.0.1:9 (from HF_ENDPOINT)")."""
    if constants.ENDPOINT == constants._HF_DEFAULT_ENDPOINT:
        return constants.ENDPOINT
    return f"{constants.ENDPOINT} (from HF_ENDPOINT)"
