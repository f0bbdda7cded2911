"""The operator's list of sandboxes: registry rows joined with live backend state and the config now."""

from __future__ import annotations

from typing import Any

from engine.principals import MAIN_AGENT, key_owner
from engine.sandbox import docker_ops
from engine.sandbox.backend import BACKENDS, image_of
from engine.sandbox.pool import is_pool_name
from engine.sandbox.registry import Registry, now_ms
from engine.sandbox.settings import (
    config_hash,
    layout,
    resolve_settings,
    split_namespace,
)


def list_runtimes(registry: Registry, config: Any) -> list[dict[str, Any]]:
    """Registry entries joined with live Docker state and the config they should have now."""
    entries = {e.containerName: e for e in registry.read()}
    live: dict[str, dict[str, Any]] = {}
    for backend in BACKENDS.values():
        try:
            found = backend.runtimes()
        except docker_ops.SandboxUnavailable:
            # No Docker engine answers (a bwrap-only machine): its sandboxes are listed from the registry.
            if not any(e.backendId == backend.id for e in entries.values()):
                continue
            raise
        for rt in found:
            state = "running" if rt.running else "exited"
            live[rt.name] = {"State": state, "Labels": rt.labels, "Image": rt.image}
            live[rt.name]["backend"] = rt.backend
    stamp = now_ms()
    rows: list[dict[str, Any]] = []
    for name in sorted(set(entries) | set(live)):
        entry = entries.get(name)
        c = live.get(name)
        labels = dict((c or {}).get("Labels") or {})
        pool_born = docker_ops.POOL_LABEL in labels
        if pool_born and is_pool_name(name) and entry is None:
            continue  # a ready spare: no agent's yet (docs/SANDBOX-POOL.md)
        scope = entry.sessionKey if entry else labels.get("openclaw.sessionKey", "")
        namespace, own = split_namespace(scope)  # (a gateway's own scope on a shared node)
        owner = (entry.agentId if entry else None) or labels.get("exechost.agentId") or key_owner(own)
        agent_id = owner or MAIN_AGENT  # whose settings it is compared with; an ownerless one is shown
        # with main's, but belongs to the operator alone (principals: an ownerless key is the operator's)
        settings = resolve_settings(config, agent_id)
        session = scope if settings.scope == "session" else f"agent:{agent_id}:main"
        expected_lay = layout(settings, agent_id, session, namespace=namespace)
        expected_hash = config_hash(settings, expected_lay)
        if pool_born:  # its label holds the pool key; what the claim bound it to is the registry's
            current_hash = entry.configHash if entry else None
        else:
            current_hash = labels.get("openclaw.configHash") or (entry.configHash if entry else None)
        image = str((c or {}).get("Image") or (entry.image if entry else ""))
        created = entry.createdAtMs if entry else int(labels.get("openclaw.createdAtMs", "0") or 0)
        last_used = entry.lastUsedAtMs if entry else created
        rows.append(
            {
                "containerName": name,
                "sessionKey": scope,
                # A claimed container the registry lost is nobody's but the operator's.
                "agentId": None if (pool_born and entry is None) or owner is None else agent_id,
                "running": bool(c and c.get("State") == "running"),
                "exists": c is not None,
                "image": image,
                "configuredImage": image_of(settings),
                "imageMatch": image == image_of(settings),
                "configHash": current_hash,
                "expectedConfigHash": expected_hash,
                "configMatch": current_hash == expected_hash and expected_lay.name == name,
                "createdAtMs": created,
                "lastUsedAtMs": last_used,
                "ageMs": max(0, stamp - created) if created else None,
                "idleMs": max(0, stamp - last_used) if last_used else None,
                "backend": str((c or {}).get("backend") or (entry.backendId if entry else "docker")),
            }
        )
    return rows
