"""The connection fields of a cluster's login host as a plain dict: what a job record keeps so
that later commands reconnect (:func:`login_dict`), with no paramiko and no connection.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

#: LoginSpec fields a job record keeps so that later commands reconnect.
LOGIN_KEYS = ("host", "port", "user", "identity_file", "known_hosts", "host_key_policy", "setup", "workdir",
              "proxy_jump", "ssh_config")


def login_dict(login: Any) -> Dict[str, Any]:
    """A LoginSpec, an SshHost or a dict -> a plain dict of the connection fields (``port``
    None: ssh config's Port, else 22)."""
    if isinstance(login, Mapping):
        d = dict(login)
    else:
        d = {k: getattr(login, k, None) for k in LOGIN_KEYS}
    d["setup"] = list(d.get("setup") or [])
    d["port"] = int(d["port"]) if d.get("port") else None
    d["host_key_policy"] = d.get("host_key_policy") or "reject"
    d["proxy_jump"] = list(d["proxy_jump"]) if isinstance(d.get("proxy_jump"), (list, tuple)) else d.get("proxy_jump")
    return {k: d.get(k) for k in LOGIN_KEYS}
