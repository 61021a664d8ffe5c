#!/usr/bin/env python3
"""A signed run checked with the in-toto ecosystem's own Python code.

Shares no code with anchor. For report.intoto.json and provenance.intoto.json
of RUN_DIR:
  - securesystemslib parses the DSSE envelope and verifies its signature with
    the public key as securesystemslib loads it (SSlibKey.from_crypto: its own
    default keyid, which must be the envelope's keyid and the predicate's
    signer.key_id: one id per key); a key with any other keyid must not verify it;
  - in-toto-attestation parses the payload into its Statement v1 protobuf
    (unknown fields refused) and validates it;
  - every subject's file in RUN_DIR is hashed with hashlib and compared.
For the provenance, in addition: its predicate parses into in-toto-attestation's
SLSA Provenance v1 protobuf (unknown fields refused), the fields SLSA requires
are set, every resolved dependency is a valid ResourceDescriptor, its subjects
are the report statement's, and its byproduct names report.intoto.json's digest.

    verify_attestation.py RUN_DIR PUBLIC_KEY_PEM

Exit 0 and "OK ..." when everything holds, 1 and "FAIL ..." at the first
thing that does not, 2 for a usage error. Needs securesystemslib[crypto] and
in-toto-attestation (requirements/torch2.in, pinned by hash in torch2.txt):
run it with scripts/torch2-python.
"""
import hashlib
import json
import os
import sys

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey
from cryptography.hazmat.primitives import serialization

SLSA = "https://slsa.dev/provenance/v1"


class Fail(Exception):
    pass


def verified_statement(run_dir, name, key):
    """The statement of RUN_DIR/NAME once its signature verifies, as a dict."""
    path = os.path.join(run_dir, name)
    with open(path, "rb") as f:
        envelope = Envelope.from_dict(json.load(f))
    if envelope.payload_type != "application/vnd.in-toto+json":
        raise Fail(f"{name}: payloadType is {envelope.payload_type}")
    try:
        envelope.verify([key], 1)
    except Exception as e:  # securesystemslib's VerificationError and its kin
        raise Fail(f"{name}: securesystemslib does not verify it: {e}")
    text = envelope.payload.decode("utf-8")
    pb = json_format.Parse(text, statement_pb2.Statement(), ignore_unknown_fields=False)
    try:
        Statement.copy_from_pb(pb).validate()
    except ValueError as e:
        raise Fail(f"{name}: in-toto-attestation refuses the statement: {e}")
    statement = json.loads(text)
    for s in statement["subject"]:
        with open(os.path.join(run_dir, s["name"]), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != s["digest"]["sha256"]:
            raise Fail(f"{name}: subject {s['name']} has SHA-256 {digest}, the statement says {s['digest']['sha256']}")
    return statement


def check_provenance(run_dir, report_statement, provenance):
    if provenance["predicateType"] != SLSA:
        raise Fail(f"provenance.intoto.json: predicateType is {provenance['predicateType']}")
    pb = json_format.ParseDict(provenance["predicate"], provenance_pb2.Provenance(),
                               ignore_unknown_fields=False)
    bd, rd = pb.build_definition, pb.run_details
    if not bd.build_type or not bd.HasField("external_parameters") or not rd.builder.id:
        raise Fail("provenance: buildType, externalParameters and runDetails.builder.id are required by SLSA v1")
    for i, dep in enumerate(list(bd.resolved_dependencies) + list(rd.builder.builder_dependencies)):
        try:
            ResourceDescriptor.copy_from_pb(dep).validate()
        except ValueError as e:
            raise Fail(f"provenance: dependency {i}: {e}")
        if not dep.uri and not dep.digest:
            raise Fail(f"provenance: dependency {i} ({dep.name}) has neither a uri nor a digest")
    if provenance["subject"] != report_statement["subject"]:
        raise Fail("provenance: its subjects are not the report statement's")
    with open(os.path.join(run_dir, "report.intoto.json"), "rb") as f:
        envelope_digest = hashlib.sha256(f.read()).hexdigest()
    byproducts = {b.name: dict(b.digest) for b in rd.byproducts}
    if byproducts.get("report.intoto.json", {}).get("sha256") != envelope_digest:
        raise Fail("provenance: its byproduct report.intoto.json is not the envelope beside it")
    return len(bd.resolved_dependencies)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    run_dir, pem_path = sys.argv[1], sys.argv[2]
    with open(pem_path, "rb") as f:
        public = serialization.load_pem_public_key(f.read())
    key = SSlibKey.from_crypto(public)  # its default keyid and scheme (ecdsa-sha2-nistp256)
    try:
        # The same signature under another keyid is not this key's: securesystemslib matches by keyid.
        renamed = SSlibKey("", key.keytype, key.scheme, key.keyval)
        try:
            verified_statement(run_dir, "report.intoto.json", renamed)
            raise Fail("report.intoto.json verifies with a key whose keyid is not the envelope's")
        except Fail as e:
            if "securesystemslib does not verify it" not in str(e):
                raise
        report = verified_statement(run_dir, "report.intoto.json", key)
        if report["predicate"]["signer"]["key_id"] != key.keyid:
            raise Fail(f"predicate.signer.key_id {report['predicate']['signer']['key_id']} is not securesystemslib's "
                       f"keyid {key.keyid}")
        provenance = verified_statement(run_dir, "provenance.intoto.json", key)
        deps = check_provenance(run_dir, report, provenance)
    except Fail as e:
        print(f"FAIL {e}")
        return 1
    except (OSError, KeyError, ValueError, json_format.ParseError) as e:
        print(f"FAIL {type(e).__name__}: {e}")
        return 1
    print(f"OK report and provenance verify with securesystemslib; statements valid for in-toto-attestation; "
          f"{len(report['subject'])} subjects; SLSA Provenance v1 with {deps} resolved dependencies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
