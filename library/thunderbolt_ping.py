#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: thunderbolt_ping
short_description: Verify every Thunderbolt cable of a Mac with a ping over its own link
description:
  - Pings the peer address of each planned link from this end's address (C(ping -S)),
    so the answer can only come back over that cable.
  - Fails naming every cable that did not answer, with the fix. Read-only; in check mode
    nothing is sent (the planned addresses may not exist yet) and the result says so.
version_added: "0.1.0"
options:
  links:
    description: This host's links from the C(mlx_ip_plan) filter.
    type: list
    elements: dict
    required: true
  count:
    description: Echo requests per cable.
    type: int
    default: 2
  timeout:
    description: Seconds to wait for each cable (macOS C(ping -t)).
    type: int
    default: 3
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Ping every cable over its own /30
  thunderbolt_ping:
    links: "{{ mlx_cluster_plan.ip_plan.hosts[inventory_hostname] }}"
"""

RETURN = r"""
results:
  description: One entry per cable.
  returned: always
  type: list
  elements: dict
  sample: [{"cable": "m1:en2~m2:en2", "iface": "en2", "address": "10.208.3.1",
            "peer_address": "10.208.3.2", "ok": true}]
"""

from ansible.module_utils.basic import AnsibleModule


def describe(link):
    return (f"cable {link.get('cable', '?')}: {link.get('iface')} {link.get('address')} -> "
            f"{link.get('peer_host', '?')}:{link.get('peer_iface', '?')} {link.get('peer_address')}")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            links=dict(type="list", elements="dict", required=True),
            count=dict(type="int", default=2),
            timeout=dict(type="int", default=3),
        ),
        supports_check_mode=True,
    )
    links = module.params["links"]
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, results=[],
                         msg="check mode: the cables are not pinged (planned addresses may not exist yet)")
    ping = module.get_bin_path("ping", required=True)
    results, failed = [], []
    for link in links:
        argv = [ping, "-q", "-c", str(module.params["count"]), "-t", str(module.params["timeout"]),
                "-S", link["address"], link["peer_address"]]
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})
        res = {k: link.get(k) for k in ("cable", "iface", "address", "peer_host", "peer_iface", "peer_address")}
        res["ok"] = rc == 0
        results.append(res)
        if rc != 0:
            failed.append(describe(link))
    if failed:
        module.fail_json(
            msg="no answer over " + "; ".join(failed)
            + ". Fix: check that the cable is plugged in at both ends (System Information > Thunderbolt "
              "shows the peer), then re-run the network stage.",
            results=results)
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
