"""Where the golden files are: $RKV_SHARED_DIR when set, else ../shared beside the repository (as
the C++ tests find them, tests/test_util.h)."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shared_dir():
    return os.environ.get("RKV_SHARED_DIR") or os.path.join(os.path.dirname(REPO), "shared")
