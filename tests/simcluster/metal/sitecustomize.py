"""The simulated Mac's Metal device, as MLX reports it (tests only).

The simulated Macs run Linux, whose mlx wheel has no Metal: `mlx.core.device_info()` there
names the CPU and nothing else. A Mac's MLX also reports `memory_size` and
`max_recommended_working_set_size` (Metal's recommendedMaxWorkingSetSize), which the env stage
reads (roles/python_env/files/mlx_versions.py) for the memory check. The harness puts this
directory on PYTHONPATH of every ssh session of a simulated Mac (its sshd_config's SetEnv), so
Python imports this module at start-up (site.py's `sitecustomize`); it adds those two keys to
`device_info()` when mlx.core is imported, from the Mac's own `sysctl` (the shim): what a Mac
of that memory and macOS reports.

What macOS reports (sources; tests/simcluster/README.md lists what stays unverified):
- the sysctl's value once `iogpu.wired_limit_mb` is set: Metal's value follows it both ways
  (AlexsJones/llmfit PR #754, an M3 16 GB; antirez/ds4 PR #893, an M5 Max 128 GB);
- macOS's own default while it is 0: on macOS 26, 11.84 of 16 GB (74 %) and 107.52 of 128 GiB
  (84 %), the two measured points, taken here as the share below and above 36 GB; on macOS 13-15
  2/3 of memory up to 36 GB and 3/4 above (llama.cpp's and exo's logs).
"""

import sys

GIB = 1 << 30


def default_share(memsize, macos_major):
    if macos_major >= 26:
        return 0.74 if memsize <= 36 * GIB else 0.84
    return 2 / 3 if memsize <= 36 * GIB else 3 / 4


def _mac():
    """(memory bytes, iogpu.wired_limit_mb, macOS major) from this Mac's sysctl shim. (subprocess
    is imported here, not at start-up: every Python process of the Mac loads this module, and
    only the few that import mlx.core read the Mac.)"""
    import subprocess

    out = subprocess.run(
        ["sysctl", "-n", "hw.memsize", "iogpu.wired_limit_mb", "kern.osproductversion"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1]), int(out[2].split(".")[0])


def _patch(core):
    cpu_info = core.device_info

    def device_info():
        info = dict(cpu_info())
        memsize, wired_mb, major = _mac()
        info["memory_size"] = memsize
        info["max_recommended_working_set_size"] = (
            wired_mb << 20 if wired_mb else int(memsize * default_share(memsize, major))
        )
        return info

    core.device_info = device_info


class _MetalFinder:
    """Finds mlx.core as the other finders do, then patches it once it is loaded. (A meta path
    finder needs only find_spec: importlib.abc is not imported, it costs every Python start of
    the Mac about 20 ms, importlib.resources and pathlib with it.)"""

    def find_spec(self, name, path, target=None):
        if name != "mlx.core":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _MetalFinder())
