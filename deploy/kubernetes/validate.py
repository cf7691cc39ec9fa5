#!/usr/bin/env python3
"""Validate Kubernetes manifests offline, as strictly as `kubectl apply` would.

Core kinds (Deployment, Service, Secret, PodDisruptionBudget, ...) are checked against the
Kubernetes OpenAPI schemas that the kubernetes-validate package bundles, in strict mode (an
unknown or misspelt field is an error), for every Kubernetes version from --min-version to the
newest the package knows. PodMonitor (monitoring.coreos.com/v1, a CRD) is checked against
schemas/podmonitor-monitoring-v1.json. A kind with no schema, a duplicate key or a YAML error is
an error, never a warning.

    validate.py [--min-version 1.30] FILE...

Exit status: 0 all valid, 1 something invalid, 2 kubernetes-validate is not installed.
Run by tests/tests/kubernetes.rs with the virtualenv scripts/test.sh makes
(target/tools/kubernetes-validate).
"""

import argparse
import json
import os
import sys

try:
    import jsonschema
    import kubernetes_validate.utils as kv
    import yaml
    from packaging.version import Version
except ImportError as e:  # pragma: no cover - depends on the environment
    print(f"validate.py: kubernetes-validate is not installed ({e})", file=sys.stderr)
    sys.exit(2)

HERE = os.path.dirname(os.path.abspath(__file__))
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): os.path.join(
        HERE, "schemas", "podmonitor-monitoring-v1.json"
    ),
}


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate mapping keys (kubectl does; PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def versions_from(minimum):
    """Bundled versions (each appears twice: plain and strict schema folders), oldest first."""
    return sorted({v for v in kv.all_versions() if Version(v) >= Version(minimum)}, key=Version)


def check_document(doc, versions):
    """Errors (strings) for one YAML document."""
    if not isinstance(doc, dict):
        return ["not a mapping"]
    kind, api = doc.get("kind"), doc.get("apiVersion")
    if not kind or not api:
        return ["no kind or apiVersion"]
    schema_path = CRD_SCHEMAS.get((api, kind))
    if schema_path:
        with open(schema_path) as f:
            schema = json.load(f)
        validator = jsonschema.Draft202012Validator(schema)
        return [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        ]
    failing = {}  # message -> the versions that reject the document with it
    for v in versions:
        try:
            kv.validate(doc, v, strict=True)
        except kv.SchemaNotFoundError:
            return [f"no schema for {kind} {api} (Kubernetes {v}); add one to validate.py"]
        except kv.ValidationError as e:
            path = ".".join(str(p) for p in e.path) or "(top)"
            failing.setdefault(f"{path}: {e.message}", []).append(v)
    return [f"Kubernetes {', '.join(vs)}: {msg}" for msg, vs in failing.items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-version", default="1.30")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    versions = versions_from(args.min_version)
    if not versions:
        print(f"no bundled Kubernetes version >= {args.min_version}", file=sys.stderr)
        return 1
    failed = checked = unreadable = 0
    for path in args.files:
        try:
            with open(path) as f:
                docs = [d for d in yaml.load_all(f, Loader=UniqueKeyLoader) if d is not None]
        except (OSError, yaml.YAMLError) as e:
            print(f"ERROR {path}: {e}")
            unreadable += 1
            continue
        if not docs:
            print(f"ERROR {path}: no document")
            unreadable += 1
        for doc in docs:
            name = f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}" if isinstance(doc, dict) else "?"
            errors = check_document(doc, versions)
            checked += 1
            if errors:
                failed += 1
                for e in errors:
                    print(f"ERROR {path} {name}: {e}")
            else:
                print(f"OK {path} {name}")
    span = f"{versions[0]}..{versions[-1]}"
    print(
        f"{checked} resources checked against Kubernetes {span} (strict): {failed} invalid; "
        f"{unreadable} files unreadable"
    )
    return 1 if failed or unreadable else 0


if __name__ == "__main__":
    sys.exit(main())
