"""Makes a TUF repository whose catalog is signed by a delegated role, with python-tuf's Metadata API.

make_delegated_repository.py OUT CATALOG [--foreign-delegate]: the top-level targets role lists no
target and delegates "*.txt" to role "notes" (non-terminating, listing none) and "catalog.json" to
role "catalogs" (terminating, its own ed25519 key), which signs CATALOG. Consistent snapshots:
OUT/metadata/{1.root,1.targets,1.notes,1.catalogs,1.snapshot,timestamp}.json and
OUT/targets/<sha256>.catalog.json; OUT/catalog.json is CATALOG too (what `courier serve` serves).
With --foreign-delegate, "catalogs" is signed by a key the delegation does not name.
(TUFInteropTests: `courier serve --catalog-root` must follow the delegation as the client does.)
"""

import hashlib
import os
import sys
from datetime import datetime, timedelta, timezone

from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import DelegatedRole, Delegations, MetaFile, Metadata, Root, Snapshot, TargetFile, Targets, Timestamp
from tuf.api.serialization.json import JSONSerializer

out, catalog_file = sys.argv[1], sys.argv[2]
foreign = "--foreign-delegate" in sys.argv[3:]
catalog = open(catalog_file, "rb").read()
os.makedirs(f"{out}/metadata", exist_ok=True)
os.makedirs(f"{out}/targets", exist_ok=True)
expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=7)

signers = {role: CryptoSigner.generate_ed25519() for role in ("root", "timestamp", "snapshot", "targets", "notes", "catalogs")}

root = Root(expires=expires, consistent_snapshot=True)
for role in ("root", "timestamp", "snapshot", "targets"):
    root.add_key(signers[role].public_key, role)

targets = Targets(expires=expires)
targets.delegations = Delegations(keys={}, roles={})
for name, paths, terminating in (("notes", ["*.txt"], False), ("catalogs", ["catalog.json"], True)):
    role = DelegatedRole(name=name, keyids=[], threshold=1, terminating=terminating, paths=paths)
    targets.delegations.roles[name] = role
    targets.add_key(signers[name].public_key, name)

notes = Targets(expires=expires)
catalogs = Targets(expires=expires)
catalogs.targets["catalog.json"] = TargetFile.from_data("catalog.json", catalog, ["sha256"])


def write(signed, signer, name):
    metadata = Metadata(signed)
    metadata.sign(signer)
    data = metadata.to_bytes(JSONSerializer(compact=False))
    with open(f"{out}/metadata/{name}", "wb") as f:
        f.write(data)
    return data


def meta(data):
    return MetaFile(1, len(data), {"sha256": hashlib.sha256(data).hexdigest()})


write(root, signers["root"], "1.root.json")
snapshot = Snapshot(expires=expires)
snapshot.meta["targets.json"] = meta(write(targets, signers["targets"], "1.targets.json"))
snapshot.meta["notes.json"] = meta(write(notes, signers["notes"], "1.notes.json"))
catalogs_signer = CryptoSigner.generate_ed25519() if foreign else signers["catalogs"]
snapshot.meta["catalogs.json"] = meta(write(catalogs, catalogs_signer, "1.catalogs.json"))
timestamp = Timestamp(expires=expires, snapshot_meta=meta(write(snapshot, signers["snapshot"], "1.snapshot.json")))
write(timestamp, signers["timestamp"], "timestamp.json")
with open(f"{out}/targets/{hashlib.sha256(catalog).hexdigest()}.catalog.json", "wb") as f:
    f.write(catalog)
with open(f"{out}/catalog.json", "wb") as f:
    f.write(catalog)
