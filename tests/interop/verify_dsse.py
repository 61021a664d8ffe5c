#!/usr/bin/python3
"""Independent check of an anchor report envelope with python3-cryptography.

Shares no code with anchor: it parses the DSSE envelope, computes the PAE
itself, verifies the ECDSA P-256 / SHA-256 signature, and checks that the key
id in the predicate and the signature's keyid are the key's: securesystemslib's
default keyid, the SHA-256 of {"keytype","keyval":{"public": PEM},"scheme"} as
canonical JSON (sorted keys, no spaces, the PEM's newlines as they are).

    /usr/bin/python3 tests/interop/verify_dsse.py ENVELOPE PUBLIC_KEY_PEM

Exit 0 and "OK ..." when it verifies, 1 and "FAIL ..." when it does not.
Run it with Debian's /usr/bin/python3 (python3-cryptography).
"""
import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec


def pae(payload_type: bytes, payload: bytes) -> bytes:
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type, len(payload), payload)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as f:
        envelope = json.load(f)
    with open(sys.argv[2], "rb") as f:
        public_key = serialization.load_pem_public_key(f.read())
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or public_key.curve.name != "secp256r1":
        print("FAIL not an ECDSA P-256 public key")
        return 1

    payload_type = envelope["payloadType"].encode()
    payload = base64.b64decode(envelope["payload"], validate=True)
    message = pae(payload_type, payload)
    verified = False
    for s in envelope["signatures"]:
        try:
            public_key.verify(base64.b64decode(s["sig"], validate=True), message,
                              ec.ECDSA(hashes.SHA256()))
            verified = True
            break
        except InvalidSignature:
            continue
    if not verified:
        print("FAIL signature does not verify over the PAE")
        return 1
    if envelope["payloadType"] != "application/vnd.in-toto+json":
        print("FAIL payloadType is " + envelope["payloadType"])
        return 1

    statement = json.loads(payload)
    pem = public_key.public_bytes(serialization.Encoding.PEM,
                                  serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    canonical = '{"keytype":"ecdsa","keyval":{"public":"%s"},"scheme":"ecdsa-sha2-nistp256"}' % pem
    key_id = hashlib.sha256(canonical.encode()).hexdigest()
    if statement["predicate"]["signer"]["key_id"] != key_id:
        print("FAIL predicate key id %s is not the key's %s"
              % (statement["predicate"]["signer"]["key_id"], key_id))
        return 1
    if s.get("keyid") != key_id:
        print("FAIL the signature's keyid %r is not the key's %s" % (s.get("keyid"), key_id))
        return 1
    if statement["_type"] != "https://in-toto.io/Statement/v1":
        print("FAIL _type " + statement["_type"])
        return 1
    print("OK key %s, %d subjects" % (key_id, len(statement["subject"])))
    for subject in statement["subject"]:
        print("subject %s %s" % (subject["digest"]["sha256"], subject["name"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
