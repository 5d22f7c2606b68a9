"""The charts of docs/BENCHMARKS.md, drawn from one run of scripts/bench.sh.

Usage: charts.py RESULTS_DIR OUT_DIR [COMMIT]

RESULTS_DIR is what scripts/bench.sh wrote (target/bench): results.tsv (the
proxy part), and when their parts ran, cpu.tsv, bulk.tsv, shared.tsv,
front.tsv, issuer.tsv, chain.tsv, custody.tsv. Each chart is made from the
files it needs and skipped (with a line on stderr) when they are missing;
every value is the median over the run's repeats, as the report's tables
give it. COMMIT, if given, goes in each chart's title. The SVGs keep their
text as text, so a reader (and the test) finds every series by name.

    throughput.svg  req/s per workload: backend alone, nginx, fencegate
                    (memory, disk, etcd)
    latency.svg     p99 per workload, the same series
    cpu.svg         CPU time per request (user + system) of each proxy
    bulk.svg        1 GiB PUT and GET, MiB/s: direct, nginx, fencegate
    costs.svg       each option's req/s over the same gateway without it
    growth.svg      how cost grows with the fences on disk (growth.tsv, from
                    scripts/bench/growth.sh): RSS at rest and under W1,
                    time to the first answer, cold-key admission p99

Run by `scripts/bench.sh` at its end and by hand:
`target/venv/bin/python scripts/bench/charts.py target/bench docs/bench`.
"""

import csv
import os
import statistics
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams["svg.fonttype"] = "none"  # text stays text
plt.rcParams["svg.hashsalt"] = "fencegate"  # the same data, the same file
plt.rcParams["font.size"] = 10

WORKLOADS = [("w1", "W1 fenced PUTs"), ("w2", "W2 PUTs raising"), ("w3", "W3 GETs")]
# (file, target, series name) of the proxy charts, in the order drawn.
PROXIES = [
    ("results.tsv", "a", "backend alone"),
    ("results.tsv", "b", "nginx proxy_pass"),
    ("results.tsv", "c", "fencegate (memory)"),
    ("results.tsv", "d", "fencegate (disk)"),
    ("shared.tsv", "e1", "fencegate (etcd)"),
]


def read(directory, name):
    """The rows of a TSV with a header line; [] when it is missing."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def median(rows, column, **match):
    values = [
        float(r[column])
        for r in rows
        if all(r.get(k) == v for k, v in match.items()) and r.get(column) not in (None, "")
    ]
    return statistics.median(values) if values else None


def grouped_bars(ax, groups, series, values, unit):
    """Bars of `values[series][group]` (None: not drawn), one colour per
    series, labelled with their values."""
    width = 0.8 / max(len(series), 1)
    for i, name in enumerate(series):
        xs, ys = [], []
        for j, _ in enumerate(groups):
            v = values[name][j]
            if v is not None:
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(v)
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, fmt=unit, fontsize=7, rotation=90, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.margins(y=0.2)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def save(fig, out, name, made):
    path = os.path.join(out, name)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    made.append(path)


def proxy_charts(src, out, title, made):
    tables = {name: read(src, name) for name in {p[0] for p in PROXIES}}
    if not tables["results.tsv"]:
        print("charts: no results.tsv: no throughput or latency chart", file=sys.stderr)
        return
    present = [p for p in PROXIES if tables[p[0]]]
    groups = [label for _, label in WORKLOADS]
    for column, name, ylabel, unit, scale in [
        ("rps", "throughput.svg", "requests per second (median)", "%.0f", 1.0),
        ("p99_us", "latency.svg", "p99 latency, ms (median)", "%.2f", 1000.0),
    ]:
        values = {}
        for file, target, series in present:
            values[series] = []
            for w, _ in WORKLOADS:
                v = median(tables[file], column, workload=w, target=target)
                values[series].append(None if v is None else v / scale)
        fig, ax = plt.subplots(figsize=(9, 4))
        grouped_bars(ax, groups, [p[2] for p in present], values, unit)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{'Throughput' if column == 'rps' else 'p99 latency'}, 64 connections{title}")
        save(fig, out, name, made)


def cpu_chart(src, out, title, made):
    rows = read(src, "cpu.tsv")
    if not rows:
        print("charts: no cpu.tsv: no CPU chart", file=sys.stderr)
        return
    series = [("b", "nginx proxy_pass"), ("c", "fencegate (memory)"), ("d", "fencegate (disk)")]
    values = {}
    for target, name in series:
        values[name] = [
            median(rows, "cpu_us_per_request", workload=w, target=target) for w, _ in WORKLOADS
        ]
    fig, ax = plt.subplots(figsize=(9, 4))
    grouped_bars(ax, [label for _, label in WORKLOADS], [s[1] for s in series], values, "%.1f")
    ax.set_ylabel("CPU µs per request, user + system (median)")
    ax.set_title(f"What each proxy spends per request{title}")
    save(fig, out, "cpu.svg", made)


def bulk_chart(src, out, title, made):
    rows = read(src, "bulk.tsv")
    if not rows:
        print("charts: no bulk.tsv: no bulk chart", file=sys.stderr)
        return
    series = [("direct", "direct to the store"), ("nginx", "nginx proxy_pass"), ("fencegate", "fencegate")]
    groups = [("put", "1 GiB PUT"), ("get", "1 GiB GET")]
    values = {
        name: [median(rows, "mib_per_s", direction=d, target=t) for d, _ in groups]
        for t, name in series
    }
    fig, ax = plt.subplots(figsize=(7, 4))
    grouped_bars(ax, [label for _, label in groups], [s[1] for s in series], values, "%.0f")
    ax.set_ylabel("MiB/s (median)")
    ax.set_title(f"Bulk transfer through each{title}")
    save(fig, out, "bulk.svg", made)


# (label, file, workload, target with the option, file, workload, target without)
COSTS = [
    ("TLS to clients", "front.tsv", "w1", "c-tls-client", "front.tsv", "w1", "c"),
    ("TLS to the backend", "front.tsv", "w1", "c-tls-up", "front.tsv", "w1", "c"),
    ("access log", "front.tsv", "w1", "c-log", "front.tsv", "w1", "c"),
    ("token trust (--token-issuer)", "issuer.tsv", "w2", "c-issuer", "issuer.tsv", "w2", "c"),
    ("chained writes", "chain.tsv", "w1c", "c-chain", "chain.tsv", "w1c", "c-chain-off"),
    ("custody, S3 (SigV4)", "custody.tsv", "w1", "c-custody-s", "custody.tsv", "w1", "c-custody-u"),
    ("custody, Azure (Shared Key)", "custody.tsv", "w1", "c-custody-as", "custody.tsv", "w1", "c-custody-au"),
]


def costs_chart(src, out, title, made):
    labels, ratios = [], []
    for label, f1, w1, t1, f0, w0, t0 in COSTS:
        with_option = median(read(src, f1), "rps", workload=w1, target=t1)
        without = median(read(src, f0), "rps", workload=w0, target=t0)
        if with_option is None or not without:
            print(f"charts: no figures for {label}: left out of costs.svg", file=sys.stderr)
            continue
        labels.append(label)
        ratios.append(with_option / without)
    if not labels:
        print("charts: no option measured: no costs chart", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(labels) + 1.2))
    bars = ax.barh(range(len(labels)), ratios, color="#4c72b0")
    ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_xlim(0, max(1.1, max(ratios) * 1.15))
    ax.set_xlabel("req/s with the option / the same gateway without it (medians, same run)")
    ax.set_title(f"What each option costs{title}")
    save(fig, out, "costs.svg", made)


def growth_chart(src, out, title, made):
    rows = [r for r in read(src, "growth.tsv") if float(r["fences"]) > 0]
    if not rows:
        print("charts: no growth.tsv: no growth chart", file=sys.stderr)
        return
    fences = [float(r["fences"]) for r in rows]
    fig, (mem, time) = plt.subplots(1, 2, figsize=(10, 4))
    for column, label in [("rss_rest", "RSS at rest"), ("rss_w1_max", "RSS under W1 (highest)")]:
        mem.plot(fences, [float(r[column]) / 2**20 for r in rows], marker="o", label=label)
    mem.set_ylabel("MiB")
    mem.set_ylim(bottom=0)
    for column, label in [
        ("first_answer_ms", "first answer after start (ms)"),
        ("cold_warm_p99_us", "cold-key admission p99, page cache warm (us)"),
        ("cold_disk_p99_us", "cold-key admission p99, page cache dropped (us)"),
    ]:
        points = [(f, float(r[column])) for f, r in zip(fences, rows) if r.get(column) not in (None, "")]
        if points:
            time.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    time.set_yscale("log")
    for ax in (mem, time):
        ax.set_xscale("log")
        ax.set_xlabel("fences on disk")
        ax.legend(fontsize=8)
    fig.suptitle(f"Fences beyond memory: --state disk, default --fence-cache{title}")
    save(fig, out, "growth.svg", made)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    title = f" (commit {sys.argv[3]})" if len(sys.argv) > 3 else ""
    os.makedirs(out, exist_ok=True)
    made = []
    proxy_charts(src, out, title, made)
    cpu_chart(src, out, title, made)
    bulk_chart(src, out, title, made)
    costs_chart(src, out, title, made)
    growth_chart(src, out, title, made)
    for path in made:
        print(path)


if __name__ == "__main__":
    main()
