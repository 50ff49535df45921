"""Tabulate every benchmark result in a directory: results.md, and chart.png when several.
When the latest run compared backends (benchmark_backends), its comparison comes first: each
backend's tokens/s and its ratio to the first one listed (<run id>-side-by-side.json, written by
the role from plugins/plugin_utils/bench_runs.py side_by_side).

Usage: bench_report.py RESULTS_DIR   (runs on the controller; prints the Markdown table)
"""

import json
import sys
from pathlib import Path

COLUMNS = [
    ("backend", "backend"),
    ("world_size", "ranks"),
    ("mode", "mode"),
    ("prompt_tokens", "prompt tok"),
    ("generation_tokens", "gen tok"),
    ("num_trials", "trials"),
    ("prompt_tps", "prompt tok/s (median)"),
    ("generation_tps", "gen tok/s (median)"),
    ("gen_spread", "gen tok/s min-max"),
    ("peak_memory_gb", "peak GB per rank"),
    ("tokens_sha256", "tokens sha256"),
]


def gb(value):
    """GB as the cluster report writes them (plugins/plugin_utils/report.py _num): three
    significant digits below 1 (a small model's few MB read 0.00 with two decimals, as if nothing
    had been measured), two decimals above."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.3g}" if 0 < abs(value) < 1 else f"{value:.2f}"


def cell(key, value):
    if key == "peak_memory_gb" and isinstance(value, list):
        return " / ".join(gb(v) for v in value)
    if key == "tokens_sha256" and isinstance(value, str):
        return value[:12]
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def load(folder):
    runs = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and "generation_tps" in data:
            data["_file"] = path.name
            spread = (data.get("stats") or {}).get("generation_tps") or {}
            if "min" in spread and "max" in spread:
                data["gen_spread"] = f"{spread['min']:.2f}-{spread['max']:.2f}"
            runs.append(data)
    return runs


def table(runs):
    columns = list(COLUMNS)
    if any(r.get("fallback_from") for r in runs):  # a run that could not bring RDMA up ran on the ring
        columns.insert(1, ("fallback_from", "fell back from"))
    if any(r.get("compared_as") for r in runs):  # a run that compared backends
        columns[1:1] = [("compared_as", "as asked"), ("over", "over"), ("round", "round")]
    lines = ["| run | " + " | ".join(h for _, h in columns) + " |", "|---|" + "---|" * len(columns)]
    for r in runs:
        lines.append(
            f"| {r['_file'].split('-')[0][:8]} | " + " | ".join(cell(k, r.get(k, "")) for k, _ in columns) + " |"
        )
    return "\n".join(lines) + "\n"


def latest_comparison(folder):
    """The comparison of the latest run that compared backends, or None."""
    files = sorted(Path(folder).glob("*-side-by-side.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(files):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("modes"), dict):
            return data
    return None


def number(value, digits=2):
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def comparison(data):
    ref = data.get("reference")
    lines = [
        f"## Backends side by side (run {str(data.get('run_id', '?'))[:8]}, {data.get('rounds')} round(s))",
        "",
        f"Ratios are to {ref}, taken per round, then the median.",
        "",
        "| mode | backend | over | prompt tok/s | gen tok/s | prompt ratio | gen ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, rows in data["modes"].items():
        for r in rows:
            name = str(r.get("name")) + (" (fell back to ring)" if r.get("fell_back") else "")
            lines.append(
                f"| {mode} | {name} | {r.get('over')} | {number(r.get('prompt_tps'))} | "
                f"{number(r.get('generation_tps'))} | {number(r.get('prompt_ratio'))}x | "
                f"{number(r.get('generation_ratio'))}x |"
            )
    return "\n".join(lines) + "\n"


def chart(runs, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    labels = [f"{r.get('compared_as') or r['backend']}\n{r['world_size']} ranks\n{r['mode']}" for r in runs]
    fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(runs)), 3.5))
    ax.bar(range(len(runs)), [r["generation_tps"] for r in runs], color="#4a7bd0")
    ax.set_xticks(range(len(runs)), labels, fontsize=8)
    ax.set_ylabel("generation tokens/s")
    ax.set_title("mlx-cluster benchmark")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(folder):
    runs = load(folder)
    text = table(runs)
    compared = latest_comparison(folder)
    if compared:
        text = comparison(compared) + "\n## Every run\n\n" + text
    md = Path(folder, "results.md")
    md.write_text("# Benchmark results\n\n" + text)
    md.chmod(0o600)  # as every artifact: the user's alone
    print(text, end="")
    if len(runs) > 1 and chart(runs, Path(folder, "chart.png")):
        Path(folder, "chart.png").chmod(0o600)
        print(f"chart: {Path(folder, 'chart.png')}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
