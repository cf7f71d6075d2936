"""Regenerates drl/_proto from proto/ with grpcio-tools: message modules for every file, gRPC stubs
(``*_pb2_grpc.py``) for the files that declare a service.

The generated modules are committed so that installing drl needs no code generator; the test
tests/unit/test_proto_current.py runs this generator into a temporary folder and fails when the
committed copy differs.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "drl" / "_proto"


def generate(out: Path) -> list[Path]:
    import grpc_tools
    from grpc_tools import protoc

    files = sorted(PROTO_ROOT.glob("drl/v1/*.proto"))
    out.mkdir(parents=True, exist_ok=True)
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}"]
    args += [str(f.relative_to(PROTO_ROOT)) for f in files]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted(p for p in out.rglob("*_pb2.py*"))


def generate_services(out: Path) -> list[Path]:
    """gRPC stubs for the proto files with a ``service``. grpcio-tools writes absolute imports of the message
    module (``from drl.v1 import x_pb2``), which would resolve against the ``drl`` package itself; they are
    rewritten to the package the modules live in, ``drl._proto.drl.v1``."""
    import grpc_tools
    from grpc_tools import protoc

    files = sorted(f for f in PROTO_ROOT.glob("drl/v1/*.proto") if re.search(r"^service ", f.read_text(), re.M))
    if not files:
        return []
    out.mkdir(parents=True, exist_ok=True)
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--grpc_python_out={out}"]
    args += [str(f.relative_to(PROTO_ROOT)) for f in files]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = []
    for f in files:
        path = out / f.relative_to(PROTO_ROOT).with_name(f.stem + "_pb2_grpc.py")
        path.write_text(
            re.sub(r"^from drl\.v1 import ", "from drl._proto.drl.v1 import ", path.read_text(), flags=re.M)
        )
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    for path in generate(args.out) + generate_services(args.out):
        print(path.relative_to(args.out))


if __name__ == "__main__":
    sys.exit(main())
