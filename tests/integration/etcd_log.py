# Prints the coordinator's version log as etcd holds it (`etcdctl get --prefix P/log/ -w json` on
# stdin), one record per line: "SEQ KIND VERSION DECISION" (decision 0 none, 1 commit, 2 abort).
# A minimal reader of the protobuf wire format for state.proto's LogRecord: the fields the tests
# check, nothing else. Used by tests/integration/etcd_lib.bash.
import base64
import json
import sys


def fields(data):
    """(field number, wire type, value) of each field: ints for varints, bytes for the others."""
    i = 0
    while i < len(data):
        key, i = varint(data, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = varint(data, i)
        elif kind == 2:
            length, i = varint(data, i)
            value, i = data[i:i + length], i + length
        elif kind == 1:
            value, i = data[i:i + 8], i + 8
        elif kind == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % kind)
        yield number, kind, value


def varint(data, i):
    shift = result = 0
    while True:
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


KINDS = {3: "publish", 4: "decision", 5: "rollback", 6: "writer"}
doc = json.load(sys.stdin)
for kv in doc.get("kvs", []):
    record = base64.b64decode(kv["value"])
    seq, kind, version, decision = 0, "?", 0, 0
    for number, _, value in fields(record):
        if number == 1:
            seq = value
        elif number in KINDS:
            kind = KINDS[number]
            for n, _, v in fields(value):
                # VersionEntry: version 1, decision 9. DecisionChange: version 1, decision 2.
                # RollbackRecord: version 1.
                if n == 1 and kind != "writer":
                    version = v
                elif (kind == "publish" and n == 9) or (kind == "decision" and n == 2):
                    decision = v
    print(seq, kind, version, decision)
