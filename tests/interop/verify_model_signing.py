#!/usr/bin/env python3
"""A run's model.sig checked by OpenSSF Model Signing's own command line.

Shares no code with anchor. For RUN_DIR (a signed run with an export/):
  1. `model_signing verify key --signature RUN_DIR/model.sig --public_key PUB
     RUN_DIR/export` succeeds (PyPI's model-signing, pinned by hash in
     requirements/torch2.txt);
  2. negative controls, each on a copy of export/ and each refused by the same
     command: one byte of model.safetensors changed, a file added, a file
     removed; and the right export with another key;
  3. with PRIVATE_KEY_PEM: model_signing signs the same export with that key
     itself (`model_signing sign key`), and its statement equals anchor's
     (ECDSA signatures differ from run to run; the signed statements must not).

    verify_model_signing.py RUN_DIR PUBLIC_KEY_PEM [PRIVATE_KEY_PEM]

Exit 0 and "OK ..." when everything holds, 1 and "FAIL ..." at the first thing
that does not, 2 for a usage error. Run it with scripts/torch2-python.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


class Fail(Exception):
    pass


def model_signing(*args):
    """(exit status, output) of `python -m model_signing ARGS`."""
    p = subprocess.run([sys.executable, "-m", "model_signing", *args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def verify(signature, public_key, model):
    return model_signing("verify", "key", "--signature", signature, "--public_key", public_key, model)


def statement(signature):
    """The signed statement, its ignore_paths sorted (model_signing lists them in set order)."""
    with open(signature, "rb") as f:
        bundle = json.load(f)
    st = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    serialization = st.get("predicate", {}).get("serialization", {})
    if "ignore_paths" in serialization:
        serialization["ignore_paths"] = sorted(serialization["ignore_paths"])
    return st


def refused(what, signature, public_key, model):
    status, out = verify(signature, public_key, model)
    if status == 0 or "Verification succeeded" in out:
        raise Fail(f"model_signing accepted {what}: {out.strip()}")
    return out.strip().splitlines()[-1] if out.strip() else ""


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    run_dir, public_key = argv[1], argv[2]
    private_key = argv[3] if len(argv) == 4 else None
    signature = os.path.join(run_dir, "model.sig")
    export = os.path.join(run_dir, "export")
    try:
        status, out = verify(signature, public_key, export)
        if status != 0 or "Verification succeeded" not in out:
            raise Fail(f"model_signing verify key refused anchor's export: {out.strip()}")
        files = sorted(os.listdir(export))
        print(f"OK   model_signing verify key accepts {signature} over {export} ({len(files)} files)")

        with tempfile.TemporaryDirectory() as tmp:
            def copy():
                d = os.path.join(tmp, f"export-{len(os.listdir(tmp))}")
                shutil.copytree(export, d)
                return d
            changed = copy()
            with open(os.path.join(changed, "model.safetensors"), "r+b") as f:
                f.seek(-1, os.SEEK_END)
                last = f.read(1)
                f.seek(-1, os.SEEK_END)
                f.write(bytes([last[0] ^ 0x01]))
            print("OK   one changed byte of model.safetensors refused:", refused("a changed weight", signature, public_key, changed))
            added = copy()
            with open(os.path.join(added, "extra.bin"), "wb") as f:
                f.write(b"x")
            print("OK   an added file refused:", refused("an added file", signature, public_key, added))
            removed = copy()
            os.remove(os.path.join(removed, "generation_config.json" if "generation_config.json" in files else files[0]))
            print("OK   a removed file refused:", refused("a removed file", signature, public_key, removed))
            other = os.path.join(tmp, "other.pub")
            with open(other, "wb") as f:
                f.write(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
            print("OK   another key refused:", refused("another key", signature, other, export))

            if private_key:
                theirs = os.path.join(tmp, "theirs.sig")
                status, out = model_signing("sign", "key", "--signature", theirs, "--private_key", private_key, export)
                if status != 0:
                    raise Fail(f"model_signing sign key failed: {out.strip()}")
                mine = statement(signature)
                # model_signing names the model after the directory as given; ours is "export" too.
                if statement(theirs) != mine:
                    raise Fail("model_signing's own statement of the export differs from anchor's:\n"
                               f"  theirs {json.dumps(statement(theirs), sort_keys=True)}\n"
                               f"  anchor {json.dumps(mine, sort_keys=True)}")
                print("OK   model_signing's own signature of the export signs the same statement as anchor's")
    except Fail as e:
        print("FAIL", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
