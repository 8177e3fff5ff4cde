"""Sums an ONNX Runtime profile (JSON, `enable_profiling` / `with_profiling`) of the plugin EP's
decode step by provider and op type: host microseconds a run, node count a run, and the runs'
own durations (`model_run` events) for the total. ORT times a node from its kernel's start to its
return, so a node of our GPU device is its host work plus its launches' enqueueing (the kernels
run asynchronously), and a CPU node is its whole computation.
Usage: python3 step_profile.py PROFILE.json [RUNS_TO_SKIP]"""
import collections, json, sys


def main():
    events = json.load(open(sys.argv[1]))
    skip = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    runs = [e for e in events if e.get("name") == "model_run"]
    runs.sort(key=lambda e: e["ts"])
    kept = runs[skip:]
    if not kept:
        sys.exit("no model_run events")
    t0 = kept[0]["ts"]
    by_op = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or e["ts"] < t0:
            continue
        a = e.get("args", {})
        key = (a.get("provider", "?"), a.get("op_name", "?"))
        by_op[key][0] += e["dur"]
        by_op[key][1] += 1
    n = len(kept)
    total = sum(e["dur"] for e in kept) / n
    nodes = sum(v[0] for v in by_op.values()) / n
    print(f"{n} runs: {total:.1f} us a run, {nodes:.1f} us of it inside nodes, "
          f"{total - nodes:.1f} us between them (ORT's executor, allocation, copies' setup)")
    print("| provider | op | nodes a run | us a run | us a node |")
    print("|---|---|---|---|---|")
    for (prov, op), (dur, cnt) in sorted(by_op.items(), key=lambda kv: -kv[1][0]):
        print(f"| {prov} | {op} | {cnt / n:.1f} | {dur / n:.1f} | {dur / cnt:.2f} |")


if __name__ == "__main__":
    main()
