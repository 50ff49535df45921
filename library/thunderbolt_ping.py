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
  - All cables of the Mac are pinged at the same time (one C(ping) per cable, each on its own
    link), so the check takes as long as the slowest cable, not the sum of them. Each C(ping)
    stops at the first answer (C(-o)); a cable passes when it answered at least once within
    I(count) requests and I(timeout) seconds, as C(ping)'s exit status says.
  - Fails naming every cable that did not answer, with the fix. Read-only; in check mode
    nothing is sent (the planned addresses may not exist yet) and the result says so.
version_added: "0.1.0"
notes:
  - "A C(ping) may take at least I(timeout) + 10 seconds, whatever I(command_timeout) says."
extends_documentation_fragment:
  - mlx.cluster.attributes
  - mlx.cluster.command_timeout
options:
  links:
    description: This host's links from the C(mlx_ip_plan) filter.
    type: list
    elements: dict
    required: true
  count:
    description: Echo requests per cable at most (one answer is enough).
    type: int
    default: 2
  timeout:
    description: Seconds to wait for each cable (macOS C(ping -t)).
    type: int
    default: 3
  first_end_only:
    description:
      - Ping only the cables whose id (C(host:iface~host:iface), ends sorted) starts with this
        Mac's end. An echo request and its reply cross the cable both ways and use both ends'
        addresses and routes, so one ping per cable checks it; the other end skips it (run the
        module on both ends, as the role does).
    type: bool
    default: false
  fail_on_no_answer:
    description:
      - Fail when a cable did not answer. With C(false) the silent cables are returned in
        RV(no_answer) and the task succeeds, so the play can leave out cables to a Mac that
        dropped out of the run (its own failure names it).
    type: bool
    default: true
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
  description: One entry per cable pinged (with I(first_end_only), only those this Mac pings).
  returned: always
  type: list
  elements: dict
  sample: [{"cable": "m1:en2~m2:en2", "iface": "en2", "address": "10.208.3.1",
            "peer_address": "10.208.3.2", "peer_host": "m2", "peer_iface": "en2", "ok": true}]
no_answer:
  description: The cables that did not answer, each described for a message.
  returned: when not in check mode
  type: list
  elements: dict
  sample: [{"peer_host": "m2", "problem": "cable m1:en2~m2:en2: en2 10.208.3.1 -> m2:en2 10.208.3.2"}]
"""

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import (
    no_answer_msg,
    ping_argv,
    ping_result,
    pinged_from_the_other_end,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, CommandTimeout, Runner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            links=dict(type="list", elements="dict", required=True),
            count=dict(type="int", default=2),
            timeout=dict(type="int", default=3),
            first_end_only=dict(type="bool", default=False),
            fail_on_no_answer=dict(type="bool", default=True),
            **COMMAND_TIMEOUT_SPEC,
        ),
        supports_check_mode=True,
    )
    links = module.params["links"]
    if module.params["first_end_only"]:
        links = [x for x in links if not pinged_from_the_other_end(x)]
    if module.check_mode:
        module.exit_json(
            changed=False,
            skipped=True,
            results=[],
            msg="check mode: the cables are not pinged (planned addresses may not exist yet)",
        )
    ping = module.get_bin_path("ping", required=True)
    # ping ends by itself after `timeout` (-t); the bound is for a ping that does not
    runner = Runner(max(module.params["command_timeout"], module.params["timeout"] + 10))

    def probe(link):
        argv = ping_argv(ping, link, module.params["count"], module.params["timeout"])
        try:
            return runner.run(argv)[0]
        except CommandTimeout as exc:
            module.warn(exc.msg)
            return None  # no answer: that cable is not verified

    # Each ping runs over its own cable: nothing is shared, so they run side by side.
    with ThreadPoolExecutor(max_workers=max(1, len(links))) as pool:
        codes = list(pool.map(probe, links))
    results = [ping_result(link, rc == 0) for link, rc in zip(links, codes)]
    no_answer = [{"peer_host": r["peer_host"], "problem": r["problem"]} for r in results if not r["ok"]]
    if no_answer and module.params["fail_on_no_answer"]:
        module.fail_json(msg=no_answer_msg(no_answer), results=results, no_answer=no_answer)
    module.exit_json(changed=False, results=results, no_answer=no_answer)


if __name__ == "__main__":
    main()
