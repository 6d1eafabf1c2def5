"""Makes a TUF repository with python-tuf's Metadata API (TUFInteropTests: Courier must accept it).

make_repository.py OUT CATALOG: OUT/metadata/{1.root,1.targets,1.snapshot,timestamp}.json and
OUT/targets/<sha256>.catalog.json, consistent snapshots, ed25519 root/snapshot/timestamp keys and an
ecdsa-sha2-nistp256 targets key (two key types Courier must verify).
"""

import hashlib
import os
import sys
from datetime import datetime, timedelta, timezone

from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import MetaFile, Metadata, Root, Snapshot, TargetFile, Targets, Timestamp
from tuf.api.serialization.json import JSONSerializer

out, catalog_file = sys.argv[1], sys.argv[2]
catalog = open(catalog_file, "rb").read()
os.makedirs(f"{out}/metadata", exist_ok=True)
os.makedirs(f"{out}/targets", exist_ok=True)
expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=7)

signers = {role: CryptoSigner.generate_ed25519() for role in ("root", "timestamp", "snapshot")}
signers["targets"] = CryptoSigner.generate_ecdsa()

root = Root(expires=expires, consistent_snapshot=True)
for role, signer in signers.items():
    root.add_key(signer.public_key, role)

targets = Targets(expires=expires)
targets.targets["catalog.json"] = TargetFile.from_data("catalog.json", catalog, ["sha256"])


def write(signed, role, name):
    metadata = Metadata(signed)
    metadata.sign(signers[role])
    data = metadata.to_bytes(JSONSerializer(compact=False))
    with open(f"{out}/metadata/{name}", "wb") as f:
        f.write(data)
    return data


write(root, "root", "1.root.json")
targets_bytes = write(targets, "targets", "1.targets.json")
snapshot = Snapshot(expires=expires)
snapshot.meta["targets.json"] = MetaFile(1, len(targets_bytes), {"sha256": hashlib.sha256(targets_bytes).hexdigest()})
snapshot_bytes = write(snapshot, "snapshot", "1.snapshot.json")
timestamp = Timestamp(expires=expires, snapshot_meta=MetaFile(1, len(snapshot_bytes), {"sha256": hashlib.sha256(snapshot_bytes).hexdigest()}))
write(timestamp, "timestamp", "timestamp.json")
with open(f"{out}/targets/{hashlib.sha256(catalog).hexdigest()}.catalog.json", "wb") as f:
    f.write(catalog)
