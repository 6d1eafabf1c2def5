"""Fetches the target catalog.json with python-tuf's ngclient Updater (TUFInteropTests: python-tuf
must accept what Courier publishes) and prints it.

fetch_catalog.py METADATA_DIR TRUSTED_ROOT METADATA_URL TARGETS_URL TARGET_DIR
"""

import sys

from tuf.ngclient import Updater

metadata_dir, trusted_root, metadata_url, targets_url, target_dir = sys.argv[1:6]
with open(trusted_root, "rb") as f:
    bootstrap = f.read()
# python-tuf 7 takes the trusted root as `bootstrap` (it keeps its own copy in metadata_dir).
updater = Updater(metadata_dir, metadata_url, target_dir, targets_url, bootstrap=bootstrap)
updater.refresh()
info = updater.get_targetinfo("catalog.json")
if info is None:
    sys.exit("python-tuf: no catalog.json in the repository")
path = updater.download_target(info)
with open(path, "rb") as f:
    sys.stdout.buffer.write(f.read())
