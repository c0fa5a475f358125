"""The ``mirrorflow`` command line. Every subcommand calls the library the DAGs call."""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from mirrorflow.config import connect_settings
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import FLOW_PROPERTIES, FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError

EXIT_OK = 0
EXIT_ERROR = 1


def _flow_json(flow: FlowConfig, config: MirrorConfig) -> dict:
    return {
        "name": flow.name,
        "source": flow.source,
        "target": flow.target,
        "dag_id": flow.dag_id,
        "source_bootstrap_servers": config.clusters[flow.source].bootstrap_servers,
        "target_bootstrap_servers": config.clusters[flow.target].bootstrap_servers,
        "properties": flow.as_properties(),
        "auto_offset_reset": {"value": flow.offset_reset.value,
                              "property": flow.offset_reset.prop or None},
    }


def _print_flows(config: MirrorConfig, as_json: bool) -> None:
    flows = config.enabled_flows()
    if as_json:
        print(json.dumps({"config": str(config.path), "digest": config.digest,
                          "flows": [_flow_json(f, config) for f in flows],
                          "warnings": list(config.warnings)}, indent=2))
        return
    print(f"{len(flows)} enabled flow(s) in {config.path}")
    for flow in flows:
        print(f"\n{flow.name}  (DAG {flow.dag_id})")
        for key, value in flow.as_properties().items():
            marker = "" if key in flow.explicit else "  # default"
            print(f"  {key} = {value}{marker}")
        reset = flow.offset_reset  # resolved from the cluster's and the flow's settings
        print(f"  source.consumer.auto.offset.reset = {reset.value}  # "
              + (f"from {reset.prop}" if reset.prop else "default"))


def cmd_config_check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    for warning in config.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    _print_flows(config, args.json)
    return _check_connect(config) if args.connect else EXIT_OK


def _check_connect(config: MirrorConfig) -> int:
    """Each enabled flow's clusters answer, and whether its target runs the flow's
    transactions for this principal (exactly-once) or not (at-least-once, or no run at
    all under exactly.once.support = required)."""
    from mirrorflow.kafka.clients import transactions_refused

    status = EXIT_OK
    for flow in config.enabled_flows():
        _reachable(config, flow.source, flow.target)
        refused = transactions_refused(config.cluster(flow.target),
                                       f"mirrorflow|{flow.name}|probe")
        if refused is None:
            print(f"{flow.name}: cluster {flow.target!r} runs the flow's transactions: "
                  "exactly-once")
            continue
        required = flow.get("exactly.once.support") == "required"
        outcome = ("runs fail (exactly.once.support = required)" if required else
                   "runs write at-least-once (exactly.once.support = requested)")
        print(f"{flow.name}: cluster {flow.target!r} refuses the flow's transactions "
              f"({refused}): {outcome}; grant WRITE and DESCRIBE on the TransactionalId "
              "prefix 'mirrorflow|' (docs/security.md)")
        status = EXIT_ERROR if required else status
    return status


def cmd_config_reference(args: argparse.Namespace) -> int:
    """Print every flow property as a Markdown table (the README's reference)."""
    print("| property | default | origin | meaning |")
    print("| --- | --- | --- | --- |")
    for spec in FLOW_PROPERTIES.values():
        default = spec.default.replace("|", "\\|")
        print(f"| `{spec.name}` | `{default}` | {spec.origin} | {spec.doc} |")
    print("\nKafka Connect settings in an MM2 file, by whether MM2 would copy different "
          "records or bytes because of them: those that would are accepted only with MM2's "
          "default value (or refused outright), naming the property; the rest are ignored "
          "with a warning.\n")
    print(connect_settings.reference_table())
    return EXIT_OK


def _state_dir(args: argparse.Namespace) -> Path:
    from mirrorflow.dev import localcluster

    return Path(args.state_dir or localcluster.DEFAULT_STATE_DIR)


def cmd_local(args: argparse.Namespace) -> int:
    from mirrorflow.dev import localcluster  # development tooling: never loaded by a run
    from mirrorflow.dev.local_registries import local_registries

    config = load_config(args.config)
    state_dir = _state_dir(args)
    if args.action == "up":
        for broker in localcluster.up(config, state_dir):
            print(f"{broker.alias}: running on {broker.bootstrap} (pid {broker.pid()}, "
                  f"log {broker.log_file})")
        for server in localcluster.connect_servers(config, state_dir):
            print(f"Spark Connect: running on {server.url} (pid {server.pid()}, "
                  f"log {server.log_file})")
        for registry in local_registries(config, state_dir):
            print(f"schema registry: running on {registry.url} (pid {registry.pid()}, ids "
                  f"from {registry.first_id}, log {registry.log_file})")
    elif args.action == "down":
        stopped = localcluster.down(config, state_dir)
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    else:
        for st in localcluster.status(config, state_dir):
            state = "answering" if st.answering else "not answering"
            print(f"{st.alias}: {st.bootstrap} pid={st.pid or '-'} {state}")
        for server in localcluster.connect_servers(config, state_dir):
            state = "answering" if server.answering() else "not answering"
            print(f"Spark Connect: {server.url} pid={server.pid() or '-'} {state}")
        for registry in local_registries(config, state_dir):
            state = "answering" if registry.answering() else "not answering"
            print(f"schema registry: {registry.url} pid={registry.pid() or '-'} {state}")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from mirrorflow.dev import localcluster
    from mirrorflow.dev.demo import fill_demo_topic

    config = load_config(args.config)
    for broker in localcluster.up(config, _state_dir(args)):
        print(f"cluster {broker.alias}: {broker.bootstrap}")
    if config.enabled_flows():
        _reachable(config, config.enabled_flows()[0].source)
    demo = fill_demo_topic(config, args.topic, args.partitions, args.records)
    print(f"produced {demo.records} records to {demo.topic!r} ({demo.partitions} partitions) "
          f"on cluster {demo.cluster!r}\n")
    _print_flows(config, as_json=False)
    return EXIT_OK


def _reachable(config: MirrorConfig, *aliases: str) -> None:
    """Before a command touches clusters: each must answer, else one line naming it."""
    from mirrorflow.kafka.reachability import check_reachable

    for alias in aliases:
        check_reachable(config.cluster(alias))


def cmd_run(args: argparse.Namespace) -> int:
    from mirrorflow.progress import Sink, StreamSink
    from mirrorflow.run import run_cycle

    config = load_config(args.config)
    flow = config.flow(args.flow)
    _reachable(config, flow.source, flow.target)
    topics = [t.strip() for t in args.topics.split(",")] if args.topics else None
    result = run_cycle(args.config, args.flow, run_id=args.run_id, master=args.master,
                       only_topics=topics, max_records=args.max_records,
                       progress=Sink() if args.quiet else StreamSink())
    if args.json:
        print(result.to_json())
        return EXIT_OK
    state = "resumed pending plan" if result.resumed else "planned"
    there = (f" ({result.already_there} more were already there, written by an earlier "
             "attempt)" if result.already_there else "")
    print(f"{result.flow}: {state} {result.plan_id}; mirrored {result.records} records, "
          f"{result.bytes} bytes in {result.duration_s:.1f}s{there}")
    for p in result.partitions:
        print(f"  {p.topic}[{p.partition}] -> {p.remote_topic}[{p.partition}]: "
              f"offsets {p.planned_start}..{p.planned_end - 1}, {p.records - p.skipped} written, "
              f"{p.skipped} already there, downstream {p.first_downstream}..{p.last_downstream}")
    for gap in result.gaps:
        print(f"  data loss recorded: {gap['topic']}[{gap['partition']}] offsets "
              f"{gap['start']}..{gap['end'] - 1}")
    print(f"  offset syncs emitted: {result.offset_syncs}; checkpoints emitted: "
          f"{result.checkpoints}")
    for group in result.group_sync:
        detail = group["skipped_reason"] or f"synced {group['synced'] or 'nothing new'}"
        print(f"  group {group['group']}: {detail}")
    if result.validation:
        v = result.validation
        print(f"  completeness: passed, {v['verified_records']} of {v['planned_records']} "
              f"records verified; Data Docs {v['data_docs']}")
    if result.heartbeat:
        hb = result.heartbeat
        print(f"  heartbeat in {hb['topic']}: {'arrived' if hb['arrived'] else 'not arrived'}, "
              f"newest {hb['age_ms']} ms old")
    return EXIT_OK


def cmd_translate(args: argparse.Namespace) -> int:
    from mirrorflow.checkpoint.checkpoints import superseded_ms
    from mirrorflow.checkpoint.remote import translate_offsets

    config = load_config(args.config)
    flow = config.flow(args.flow)
    _reachable(config, flow.target)
    offsets = translate_offsets(config.cluster(flow.target), flow.source, args.group,
                                flow.policy(), superseded_ms(config, flow))
    if args.json:
        print(json.dumps([{"topic": t, "partition": p, "offset": o}
                          for (t, p), o in sorted(offsets.items())], indent=2))
    elif not offsets:
        print(f"no checkpoints for group {args.group!r} from {flow.source!r} on {flow.target!r}")
    for (topic, partition), offset in sorted(offsets.items()):
        if not args.json:
            print(f"{topic}[{partition}] {offset}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from mirrorflow.quality import reports

    if args.gaps:
        return _print_breaks(load_config(args.config), args.flow)
    flow = load_config(args.config).flow(args.flow)
    try:
        summary = reports.read(flow.name, args.run)
    except FileNotFoundError as exc:
        print(f"mirrorflow: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(summary, indent=2, sort_keys=True) if args.json
          else reports.render(summary))
    return EXIT_OK


def _print_breaks(config: MirrorConfig, flow_name: str) -> int:
    """Every named break the flow's history keeps (per source partition, the newest
    first kept), from its target: what "completeness: passed" leaves out, and why."""
    from mirrorflow.quality.reports import describe_break
    from mirrorflow.source.history import CHAIN, HistoryStore

    flow = config.flow(flow_name)
    _reachable(config, flow.target)
    chains = HistoryStore(config.cluster(flow.target), flow.source).read_all(CHAIN).chains
    found = [b for _, chain in sorted(chains.items()) for b in chain.breaks]
    if not found:
        print(f"flow {flow.name}: no named break; every source offset since the flow "
              "began is mirrored")
    for item in found:
        print(describe_break(item))
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    from mirrorflow.kafka.topic_dump import describe_records

    config = load_config(args.config)
    _reachable(config, args.cluster)
    for line in describe_records(config, args.cluster, args.topic):
        print(line)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mirrorflow", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    config_p = sub.add_parser("config", help="check a config or print the property reference")
    config_sub = config_p.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="print every enabled flow, resolved")
    check.add_argument("config", help="path to an MM2 properties file")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument("--connect", action="store_true",
                       help="also reach each enabled flow's clusters and tell whether the "
                            "target runs the flow's transactions (exactly-once)")
    check.set_defaults(func=cmd_config_check)
    ref = config_sub.add_parser("reference", help="every flow property with its default")
    ref.set_defaults(func=cmd_config_reference)

    local = sub.add_parser("local", help="local Apache Kafka brokers for the config's loopback "
                           "clusters, and its local Spark Connect server")
    local.add_argument("action", choices=["up", "down", "status"])
    local.add_argument("config")
    local.add_argument("--state-dir", help="default: .mirrorflow")
    local.set_defaults(func=cmd_local)

    run = sub.add_parser("run", help="one replication cycle of a flow: plan, Spark job, commit")
    run.add_argument("config")
    run.add_argument("--flow", required=True, help="SOURCE->TARGET")
    run.add_argument("--json", action="store_true")
    run.add_argument("--run-id", help="an id for the run (default: manual__<time>)")
    run.add_argument("--master", help="Spark master (default: mirrorflow.spark.master)")
    run.add_argument("--topics", help="only these source topics (comma-separated)")
    run.add_argument("--max-records", type=int, help="cap records per partition this run")
    run.add_argument("--quiet", action="store_true",
                     help="no progress on stderr (the plan, records written, the proof)")
    run.set_defaults(func=cmd_run)

    translate = sub.add_parser("translate", help="a group's translated offsets on the target")
    translate.add_argument("config")
    translate.add_argument("--flow", required=True, help="SOURCE->TARGET")
    translate.add_argument("--group", required=True)
    translate.add_argument("--json", action="store_true")
    translate.set_defaults(func=cmd_translate)

    report = sub.add_parser("report", help="a DAG run's summary (the newest by default)")
    report.add_argument("config")
    report.add_argument("--flow", required=True, help="SOURCE->TARGET")
    report.add_argument("--run", help="the Airflow run id")
    report.add_argument("--json", action="store_true", help="the whole summary as JSON")
    report.add_argument("--gaps", action="store_true",
                        help="every named break of the flow's history instead (retention, "
                             "recreated topics, new partitions, resets)")
    report.set_defaults(func=cmd_report)

    inspect = sub.add_parser("inspect", help="print an internal topic in readable form")
    inspect.add_argument("config")
    inspect.add_argument("--cluster", required=True)
    inspect.add_argument("--topic", required=True)
    inspect.set_defaults(func=cmd_inspect)

    demo = sub.add_parser("demo", help="start local clusters and fill a demo topic")
    demo.add_argument("config")
    demo.add_argument("--state-dir", help="default: .mirrorflow")
    demo.add_argument("--topic", default="orders")
    demo.add_argument("--partitions", type=int, default=3)
    demo.add_argument("--records", type=int, default=10_000)
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Behave like a Unix tool when piped into head: stop quietly, no traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR,
                        format="%(levelname)s %(name)s: %(message)s")
    # The client library's connection chatter: mirrorflow's own error names what failed.
    logging.getLogger("mirrorflow.librdkafka").setLevel(
        logging.INFO if args.verbose else logging.CRITICAL)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except MirrorflowError as exc:
        print(f"mirrorflow: error: {exc}", file=sys.stderr)
    except Exception as exc:  # a client library's error: still one line, no traceback
        if type(exc).__module__.split(".")[0] not in ("cimpl", "confluent_kafka", "pyspark",
                                                      "py4j"):
            raise
        detail = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc
        print(f"mirrorflow: error: {type(exc).__name__}: {detail}", file=sys.stderr)
    return EXIT_ERROR


def entry() -> NoReturn:
    """The ``mirrorflow`` command: :func:`main`, then the exit handlers, and out without
    the interpreter's teardown. Everything is written when ``main`` returns (producers
    flushed, the lease let go, the Data Docs built); tearing down what a run leaves
    loaded (Kafka clients, Spark Connect's channel, Great Expectations) took 0.6 s of a
    fresh process's 4 s run. An exception (argparse's exit, a bug's traceback) leaves as
    usual."""
    code = main()
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
