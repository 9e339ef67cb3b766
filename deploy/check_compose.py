#!/usr/bin/env python3
"""Checks what docker-compose's schema cannot: that the services of deploy/compose.yaml fit
together. Reads the output of `docker-compose config` (interpolated, anchors and merges
resolved) on stdin; prints every problem and exits 1 if there is any.

  docker-compose -f deploy/compose.yaml --env-file deploy/compose.env.example config \
    | python3 deploy/check_compose.py
"""
import sys

import yaml


def port_of(addr):
    """':8000' or '0.0.0.0:8000' -> '8000'."""
    return addr.rsplit(":", 1)[1]


def main():
    cfg = yaml.safe_load(sys.stdin)
    services = cfg.get("services", {})
    volumes = set((cfg.get("volumes") or {}).keys())
    secrets = set((cfg.get("secrets") or {}).keys())
    errors = []

    def err(svc, msg):
        errors.append(f"{svc}: {msg}")

    def program(svc):
        entry = svc.get("entrypoint") or []
        return entry[0] if entry else None

    replicas = {n: s for n, s in services.items() if program(s) == "controlplane" and s.get("command") == ["serve"]}
    edges = {n: s for n, s in services.items() if program(s) == "edge"}
    migrations = {n: s for n, s in services.items() if program(s) == "controlplane" and s.get("command") == ["migrate"]}
    if len(replicas) < 2:
        errors.append(f"want at least two control-plane replicas, found {sorted(replicas)}")
    if len(edges) < 2:
        errors.append(f"want at least two edges, found {sorted(edges)}")
    if len(migrations) != 1:
        errors.append(f"want exactly one migration service, found {sorted(migrations)}")
    migrate = next(iter(migrations), None)

    for name, svc in services.items():
        env = svc.get("environment") or {}
        attached = {s["source"] if isinstance(s, dict) else s for s in svc.get("secrets") or []}
        for s in attached - secrets:
            err(name, f"secret {s!r} is not defined at the top level")
        for key, value in env.items():
            if isinstance(value, str) and value.startswith("/run/secrets/"):
                if value[len("/run/secrets/"):] not in attached:
                    err(name, f"{key}={value} names a secret the service does not mount")
        for dep, cond in (svc.get("depends_on") or {}).items():
            if dep not in services:
                err(name, f"depends on unknown service {dep!r}")
        for vol in svc.get("volumes") or []:
            src = vol.split(":")[0] if isinstance(vol, str) else vol.get("source")
            if src and not src.startswith(("/", ".")) and src not in volumes:
                err(name, f"volume {src!r} is not defined at the top level")

    def check_health(name, svc, port):
        test = (svc.get("healthcheck") or {}).get("test") or []
        want = f"http://127.0.0.1:{port}/_ready"
        if test[:2] != ["CMD", "flagedge-probe"] or want not in test:
            err(name, f"health check must be [CMD, flagedge-probe, {want}], is {test}")

    def check_ports(name, svc, port):
        for p in svc.get("ports") or []:
            target = str(p.get("target") if isinstance(p, dict) else p.split(":")[-1]).split("/")[0]
            if target != port:
                err(name, f"publishes container port {target}, but the program listens on {port}")

    grpc_ports = {}
    for name, svc in replicas.items():
        env = svc.get("environment") or {}
        if "DATABASE_URL" not in env:
            err(name, "no DATABASE_URL")
        port = port_of(env.get("FLAGEDGE_HTTP_ADDR", "127.0.0.1:8000"))
        grpc_ports[name] = port_of(env.get("FLAGEDGE_GRPC_ADDR", "127.0.0.1:9000"))
        check_health(name, svc, port)
        check_ports(name, svc, port)
        deps = svc.get("depends_on") or {}
        if migrate and deps.get(migrate, {}).get("condition") != "service_completed_successfully":
            err(name, f"must wait for {migrate} with condition service_completed_successfully")
        # Plaintext gRPC is refused off loopback unless explicitly allowed.
        tls = "FLAGEDGE_GRPC_TLS_CERT" in env and "FLAGEDGE_GRPC_TLS_KEY" in env
        if not tls and env.get("FLAGEDGE_GRPC_INSECURE") not in ("true", "1"):
            err(name, "gRPC on the compose network needs FLAGEDGE_GRPC_TLS_CERT/KEY (or FLAGEDGE_GRPC_INSECURE)")
    if migrate and "DATABASE_URL" not in (services[migrate].get("environment") or {}):
        err(migrate, "no DATABASE_URL")
    if migrate and services[migrate].get("restart", "no") != "no":
        err(migrate, "a one-shot migration must not restart")

    seen = {"FLAGEDGE_EDGE_ID": {}, "data volume": {}}
    for name, svc in edges.items():
        env = svc.get("environment") or {}
        port = port_of(env.get("FLAGEDGE_EDGE_ADDR", "127.0.0.1:8080"))
        check_health(name, svc, port)
        check_ports(name, svc, port)
        if "FLAGEDGE_EDGE_TOKEN" not in env:
            err(name, "no FLAGEDGE_EDGE_TOKEN")
        for addr in (env.get("FLAGEDGE_CONTROL_PLANE") or "").split(","):
            host, _, p = addr.strip().rpartition(":")
            if host not in replicas:
                err(name, f"FLAGEDGE_CONTROL_PLANE names {host!r}, not a control-plane replica")
            elif p != grpc_ports[host]:
                err(name, f"FLAGEDGE_CONTROL_PLANE dials {host}:{p}, but it serves gRPC on {grpc_ports[host]}")
        if "FLAGEDGE_CONTROL_PLANE_CA" not in env:
            err(name, "no FLAGEDGE_CONTROL_PLANE_CA: the control plane's certificate is from a private CA")
        # The spool and snapshot copy must be on a named volume, one per edge: two edges on
        # one spool would forward (and delete) each other's records.
        data = env.get("FLAGEDGE_DATA_DIR")
        mounts = {}
        for vol in svc.get("volumes") or []:
            src, _, rest = vol.partition(":") if isinstance(vol, str) else (vol.get("source"), "", vol.get("target"))
            mounts[rest.split(":")[0]] = src
        if not data or data not in mounts:
            err(name, f"FLAGEDGE_DATA_DIR={data!r} is not a mounted volume (mounts: {sorted(mounts)})")
        elif mounts[data] not in volumes:
            err(name, f"FLAGEDGE_DATA_DIR is on {mounts[data]!r}, not a named volume")
        else:
            other = seen["data volume"].setdefault(mounts[data], name)
            if other != name:
                err(name, f"shares its data volume {mounts[data]!r} with {other}")
        edge_id = env.get("FLAGEDGE_EDGE_ID")
        other = seen["FLAGEDGE_EDGE_ID"].setdefault(edge_id, name)
        if not edge_id or other != name:
            err(name, f"FLAGEDGE_EDGE_ID={edge_id!r} must be set and unique (also used by {other})")

    for e in errors:
        print(f"check_compose: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"check_compose: ok: {len(replicas)} control-plane replicas, {len(edges)} edges, migration {migrate}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
