"""Cold start of `lookup-knowledge ask`: process start to first answer, and where the time goes (issue 15).

    python benchmarks/cold_start.py [--runs 5] [--data-dir /tmp/cold/data] [--query "磁盘满了怎么办"] [--json out.json]
                                    [--against OTHER_CHECKOUT]

If the data folder holds no index yet, `knowledge/` is indexed into it first (`lookup-knowledge index`). Then:

- `runs`: `--runs` times `python -m pipelines.entrypoints.cli ask --data-dir D QUERY` in a fresh process, each timed
  from before the process is spawned until it has exited (wall), with the CPU seconds of the process and its children;
  median, min and max. `cold_start_s` is the median wall.
- `breakdown`: one more fresh process that goes through what `ask` does step by step and times each step: interpreter
  start, `import pipelines.entrypoints.cli`, `from pipelines import load_pipeline, lookup`, the pipeline YAML and
  `from_dict` (which imports the component modules), Milvus Lite start and connect, each embedding model (construct,
  load and embed one query: what the first lookup would otherwise pay), each component's `warm_up`, the first lookup, a
  second lookup (the warm figure), and process exit (thread joins, atexit handlers such as the Milvus Lite server's
  shutdown, and the interpreter's teardown where the CLI does not skip it), measured by this process from the
  child's last timestamp to its exit. `steps_cpu` are the CPU seconds of each step (all threads of the process).
- `imports`: the slowest imports of `python -X importtime -c "import pipelines.entrypoints.cli; from pipelines import
  ..."` by cumulative time.

With `--against DIR` (another checkout of this repository, e.g. a copy before a change), every run alternates
between the two trees (same data folder, same venv), and both medians and their ratio are reported: on a busy
machine only a side-by-side comparison says whether a change helped.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lookup_snapshot import stable

from components.store.lite_host import LiteHostLease
from pipelines.measure.bench import wait_for_no_host

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_QUERY = "磁盘满了怎么办"

# the step-by-step child: runs in the checkout given as its working directory (sys.path[0] is the cwd with -c)
_CHILD = r"""
import json, os, sys, time
t_child = time.time()
if os.path.exists("pipelines/startup.py"):  # as `ask` starts: the collector paused until the pipeline is ready
    from pipelines.startup import pause_collection, resume_collection
else:  # a checkout from before D63
    pause_collection = resume_collection = lambda: None
pause_collection()
marks, cpu = {}, {}
_cpu = [time.process_time()]
def step(name, started):
    marks[name] = round(time.perf_counter() - started, 4)
    cpu[name] = round(time.process_time() - _cpu[0], 4)
    _cpu[0] = time.process_time()
t = time.perf_counter(); import pipelines.entrypoints.cli; step("import_cli", t)
t = time.perf_counter(); from pipelines import lookup; step("import_pipelines", t)
from pipelines.loading import load_pipeline_file
import pipelines.settings as settings
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, Deployment
# the Milvus Lite host started first, as `ask` does (a checkout from before hosts checks the folder's lock instead)
start_store = getattr(settings, "start_store", getattr(settings, "check_lite_free", lambda uri: None))
data_dir, query = sys.argv[1], sys.argv[2]
t = time.perf_counter()
deployment = Deployment.resolve(data_dir); start_store(deployment.milvus_uri)
pipeline = load_pipeline_file(DEFAULT_LOOKUP_PIPELINE, deployment)
step("pipeline_load(yaml+from_dict)", t)
t = time.perf_counter()
for _name, comp in pipeline.walk():
    collection = getattr(comp, "collection", None)
    if collection is not None and getattr(comp, "enabled", True):
        collection.store.client  # noqa: B018 - starts Milvus Lite and connects
        break
step("milvus_start_connect", t)
from components.core.embedding_backends import E5_SMALL, USE_MULTILINGUAL, get_backend
for model in (E5_SMALL, USE_MULTILINGUAL):
    t = time.perf_counter(); get_backend(model).embed_queries([query]); step(f"model:{model}(load+1 query)", t)
for name, comp in pipeline.walk():
    if hasattr(comp, "warm_up"):
        t = time.perf_counter(); comp.warm_up(); step(f"warm_up:{name}", t)
t = time.perf_counter(); pipeline.warm_up(); resume_collection(); step("pipeline.warm_up(rest)", t)
t = time.perf_counter(); first = lookup(pipeline, query); step("lookup(first)", t)
t = time.perf_counter(); lookup(pipeline, query); step("lookup(second, warm)", t)
usage = __import__("resource").getrusage(__import__("resource").RUSAGE_SELF)
print(json.dumps({"marks": marks, "cpu": cpu, "t_child": t_child, "t_end": time.time(),
                  "status": first["evidenceStatus"], "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}), flush=True)
# the CLI's own way out of `ask`, where it has one
end_process = getattr(pipelines.entrypoints.cli, "_end_process", None)
if end_process is not None:
    end_process(0)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ensure_index(data_dir: Path, knowledge: Path) -> bool:
    """Index `knowledge` into `data_dir` unless it already holds an index; True when it indexed."""
    if (data_dir / "knowledge_index.json").is_file() and (data_dir / "milvus.db").exists():
        return False
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", "index", "--knowledge", str(knowledge)]
    subprocess.run([*command, "--data-dir", str(data_dir), "--quiet"], cwd=REPO_ROOT, check=True)
    return True


def time_ask(tree: Path, data_dir: Path, query: str, warm_host: bool = False) -> dict:
    """
    One `ask` in a fresh process: wall from spawn to exit, CPU of it and its children, its answer.

    Unless `warm_host`, no Milvus Lite host runs for the folder when it starts (the `ask` starts one, which stops
    with it): the first command after a pause, and the only way a checkout from before hosts existed can open it.
    """
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", "ask", "--json", "--data-dir", str(data_dir), query]
    env = dict(os.environ)
    if not warm_host:
        wait_for_no_host(str(data_dir / "milvus.db"))
        env["LOOKUP_KNOWLEDGE_LITE_LINGER_S"] = "0"
    cpu = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"ask failed ({done.returncode}) in {tree}: {done.stderr.strip()[-500:]}")
    result = json.loads(done.stdout)
    answer = json.dumps(stable(result), sort_keys=True)  # without the trace id and the measured milliseconds
    return {"wall_s": wall, "cpu_s": _children_cpu() - cpu, "answer": answer, "status": result["evidenceStatus"]}


def breakdown(tree: Path, data_dir: Path, query: str) -> dict:
    """The step-by-step child, with interpreter start and process exit measured from here."""
    wait_for_no_host(str(data_dir / "milvus.db"))
    spawned = time.time()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data_dir), query],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "LOOKUP_KNOWLEDGE_LITE_LINGER_S": "0"},
    )
    exited = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"breakdown child failed in {tree}: {done.stderr.strip()[-800:]}")
    child = json.loads(done.stdout.strip().splitlines()[-1])
    steps = {"interpreter_start": round(child["t_child"] - spawned, 4), **child["marks"]}
    steps["process_exit(atexit, teardown)"] = round(exited - child["t_end"], 4)
    return {
        "steps": steps,
        "steps_cpu": child["cpu"],  # process CPU seconds of each step (all its threads)
        "total_s": round(exited - spawned, 3),
        "cpu_s": child["cpu_s"],  # the process' CPU seconds until it printed (exit not included)
        "status": child["status"],
    }


def slowest_imports(tree: Path, top: int = 15) -> list[dict]:
    """The slowest imports of the `ask` path, by cumulative time (`-X importtime`)."""
    code = "import pipelines.entrypoints.cli; from pipelines import load_pipeline, lookup"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], cwd=tree, capture_output=True, text=True, check=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, self_us, cumulative_us, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
        if self_us.isdigit():
            rows.append({"module": name, "cumulative_s": int(cumulative_us) / 1e6, "self_s": int(self_us) / 1e6})
    rows.sort(key=lambda row: -row["cumulative_s"])
    return rows[:top]


def _summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="ask runs per tree (default 5)")
    parser.add_argument("--data-dir", default="/tmp/cold/data", help="data folder (indexed from knowledge/ if empty)")
    parser.add_argument("--knowledge", default=str(REPO_ROOT / "knowledge"))
    parser.add_argument("--query", default=DEFAULT_QUERY)
    parser.add_argument("--against", default=None, help="another checkout: alternate runs with it, report the ratio")
    parser.add_argument("--no-breakdown", action="store_true", help="only the ask runs")
    parser.add_argument(
        "--warm-host", action="store_true", help="this tree's runs find the folder's Milvus Lite host running"
    )
    parser.add_argument("--json", default=None, help="also write the report here")
    args = parser.parse_args()

    data_dir = Path(args.data_dir).resolve()
    indexed = ensure_index(data_dir, Path(args.knowledge).resolve())
    trees = {"this": REPO_ROOT}
    if args.against:
        trees["against"] = Path(args.against).resolve()
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():  # alternate, so both see the same machine load
            if name == "this" and args.warm_host:
                os.environ["LOOKUP_KNOWLEDGE_LITE_LINGER_S"] = "0"  # the host stops as this process lets go
                lease = LiteHostLease.acquire(str(data_dir / "milvus.db"))
                runs[name].append(time_ask(tree, data_dir, args.query, warm_host=True))
                lease.release()
                wait_for_no_host(str(data_dir / "milvus.db"))  # an older tree opens the folder itself
            else:
                runs[name].append(time_ask(tree, data_dir, args.query))
    report: dict = {"data_dir": str(data_dir), "indexed_first": indexed, "query": args.query, "runs": args.runs}
    report["warm_host"] = args.warm_host
    answers = set()
    for name, tree in trees.items():
        walls = [run["wall_s"] for run in runs[name]]
        answers.update(run["answer"] for run in runs[name])
        report[name] = {
            "tree": str(tree),
            "cold_start_s": round(statistics.median(walls), 3),
            "wall_s": _summary(walls),
            "cpu_s": _summary([run["cpu_s"] for run in runs[name]]),
            "walls": [round(w, 3) for w in walls],
            "statuses": sorted({run["status"] for run in runs[name]}),
        }
    report["same_answer_every_run"] = len(answers) == 1
    if args.against:
        report["ratio_this_over_against"] = {
            "wall": round(report["this"]["cold_start_s"] / report["against"]["cold_start_s"], 3),
            "cpu": round(report["this"]["cpu_s"]["median"] / report["against"]["cpu_s"]["median"], 3),
        }
    if not args.no_breakdown:
        for name, tree in trees.items():
            report[name]["breakdown"] = breakdown(tree, data_dir, args.query)
            report[name]["imports"] = slowest_imports(tree)
    report["load_average"] = os.getloadavg()
    text = json.dumps(report, ensure_ascii=False, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
