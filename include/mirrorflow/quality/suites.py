"""The proof's Great Expectations suites: the built-in ones over the verdicts (one row per
partition or checkpoint, pandas: no Spark job per metric), the user's own over the
mirrored records (JSON files in the expectations directory, on Spark), and their Data
Docs."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from mirrorflow.config.model import FlowConfig
from mirrorflow.quality import reports
from mirrorflow.quality.gx_import import import_gx
from mirrorflow.quality.verdicts import ValidationError

if TYPE_CHECKING:
    from mirrorflow.quality.verdicts import CheckpointVerdict, PartitionVerdict

log = logging.getLogger(__name__)

FINDINGS = {
    "missing": "No source record is missing on the target.",
    "duplicates": "No record is duplicated on the target.",
    "altered": "No record in the flow's spans differs from its source record.",
    "misplaced": "Every record is at the remote offset its offset sync claims.",
    "foreign": "No record in the remote partition was written by anything but a mirror "
               "flow.",
}
DEFAULT_EXPECTATIONS_DIR = Path(__file__).resolve().parents[2] / "expectations"
# The Data Docs site's index and sections, rendered by GX's page views with their templates
# compiled once per process (mirrorflow.quality.docs_views).
_VIEWS = "mirrorflow.quality.docs_views"
SITE_VIEWS = {
    "site_index_builder": {"class_name": "DefaultSiteIndexBuilder",
                           "view": {"module_name": _VIEWS, "class_name": "IndexPageView"}},
    "site_section_builders": {section: {"view": {"module_name": _VIEWS,
                                                 "class_name": "PageView"}}
                              for section in ("expectations", "validations", "profiling")},
}


def expectations_dir(flow: FlowConfig) -> Path:
    configured = flow.get("mirrorflow.validate.expectations.dir")
    return Path(configured) if configured else DEFAULT_EXPECTATIONS_DIR


def user_suites(directory: Path) -> list[dict]:
    """GX suite documents (``{"name", "expectations": [{"type", "kwargs"}]}``), by file."""
    suites = []
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc.get("expectations"), list):
                raise ValueError("no 'expectations' list")
        except (ValueError, AttributeError) as exc:
            raise ValidationError(f"expectation suite {path}: {exc}") from None
        suites.append({"name": doc.get("name") or path.stem, **doc, "file": str(path)})
    return suites


def _completeness_suite(gx):
    e = gx.expectations
    planned = {"$PARAMETER": "planned_records"}
    suite = gx.ExpectationSuite(name="mirrorflow.completeness")
    for expectation in [
        e.ExpectTableRowCountToEqual(value={"$PARAMETER": "checked_partitions"},
                                     description="Every checked remote partition was read."),
        e.ExpectColumnSumToBeBetween(column="source_records", min_value=planned,
                                     max_value=planned,
                                     description="The planned ranges' source records: counted "
                                                 "by the writer from what the range source "
                                                 "read (a range one attempt wrote whole), "
                                                 "else read from the source again."),
        e.ExpectColumnPairValuesToBeEqual(column_A="target_records", column_B="source_records",
                                          description="The flow's records on the target "
                                                      "(read read_committed) are as many as "
                                                      "the source's, range by range."),
        e.ExpectColumnPairValuesToBeEqual(column_A="target_digest", column_B="source_digest",
                                          description="Per range, the XOR of xxhash64 of "
                                                      "key, value, headers and timestamp "
                                                      "with the remote offset is equal on "
                                                      "both sides: every source record sits "
                                                      "where its span's offset syncs put it "
                                                      "(timestamps left out on LogAppendTime "
                                                      "topics; 0 and -1 as the plan's time)."),
        *[e.ExpectColumnValuesToBeInSet(column=name, value_set=[0], description=meaning)
          for name, meaning in FINDINGS.items()],
    ]:
        suite.add_expectation(expectation)
    return suite


def _checkpoint_suite(gx):
    suite = gx.ExpectationSuite(name="mirrorflow.checkpoints")
    suite.add_expectation(gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="mirrored_downstream_end", column_B="checkpoint_downstream_offset",
        or_equal=True, description="No checkpoint points consumers past the flow's "
                                   "mirrored records."))
    return suite


def _suite_from_doc(gx, doc: dict):
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    suite = gx.ExpectationSuite(name=doc["name"])
    for item in doc["expectations"]:
        try:
            config = ExpectationConfiguration(type=item["type"], kwargs=item.get("kwargs", {}),
                                              meta=item.get("meta"))
            suite.add_expectation_configuration(config)
        except Exception as exc:
            raise ValidationError(f"expectation suite {doc['file']}: {item!r}: {exc}") from None
    return suite


def _context(docs_dir: Path | None = None):
    """An ephemeral GX context, without progress bars; with a Data Docs site in
    ``docs_dir`` where one is given."""
    gx = import_gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:
        context.add_data_docs_site(site_name="run", site_config={
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(docs_dir)}, **SITE_VIEWS})
    return context


def run_suites(verdict_list: list[PartitionVerdict], cps: list[CheckpointVerdict],
               planned_records: int, records_frame, suites: list[dict], run_name: str
               ) -> tuple[dict[str, bool], list[dict]]:
    """Run the GX suites: suite name -> success, and each suite's validation result
    (JSON) from which :func:`build_docs` renders the Data Docs, in whichever process
    gives the verdict (the DAG's ``validate`` task)."""
    gx = import_gx()
    context = _context()
    # The built-in suites look at one row per range or checkpoint: pandas, no Spark jobs
    # (GX computes every metric with a job of its own). User suites see the mirrored
    # records, on Spark.
    import pandas as pd

    small = context.data_sources.add_pandas(name="mirrorflow")
    columns = ["topic", "partition", "remote_topic", "source_records", "target_records",
               "source_digest", "target_digest", *FINDINGS]
    ranges_frame = pd.DataFrame([[getattr(v, c) for c in columns] for v in verdict_list
                                 if v.checked], columns=columns)
    cp_columns = ["group", "topic", "partition", "checkpoint_upstream_offset", "mirrored_end",
                  "checkpoint_downstream_offset", "mirrored_downstream_end"]
    cps_frame = pd.DataFrame([[getattr(c, name) for name in cp_columns] for c in cps
                              if c.checkpoint_downstream_offset is not None],
                             columns=cp_columns)
    runs = [(small, "ranges", ranges_frame, _completeness_suite(gx)),
            (small, "checkpoints", cps_frame, _checkpoint_suite(gx))]
    if suites:
        large = context.data_sources.add_spark(name="mirrorflow-records")
        runs += [(large, "records", records_frame, _suite_from_doc(gx, doc)) for doc in suites]
    parameters = {"planned_records": planned_records,
                  "checked_partitions": sum(1 for v in verdict_list if v.checked)}
    outcome, results = {}, []
    for source, asset_name, frame, suite in runs:
        asset = (source.get_asset(asset_name) if asset_name in source.get_asset_names()
                 else source.add_dataframe_asset(name=asset_name))
        batch = asset.add_batch_definition_whole_dataframe(f"{suite.name}/{asset_name}")
        suite = context.suites.add(suite)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(data=batch, suite=suite, name=suite.name))
        result = definition.run(batch_parameters={"dataframe": frame},
                                expectation_parameters=parameters,
                                run_id=gx.RunIdentifier(run_name=run_name))
        outcome[suite.name] = bool(result.success)
        results.append(result.to_json_dict())
    return outcome, results


def build_docs(results: list[dict], docs_dir: Path, flow_name: str, run_id: str) -> None:
    """Render the Data Docs of the suites' ``results`` (:func:`run_suites`) into
    ``docs_dir`` and publish them to the run's reports. A failure is logged: the verdict
    stands without its HTML."""
    try:
        from great_expectations.core.expectation_validation_result import (
            ExpectationSuiteValidationResultSchema,
        )
        from great_expectations.core.run_identifier import RunIdentifier
        from great_expectations.data_context.types.resource_identifiers import (
            ExpectationSuiteIdentifier,
            ValidationResultIdentifier,
        )

        context = _context(docs_dir)
        for doc in results:
            result = ExpectationSuiteValidationResultSchema().load(doc)
            context.validation_results_store.set(ValidationResultIdentifier(
                ExpectationSuiteIdentifier(result.suite_name),
                RunIdentifier(**result.meta["run_id"]), "__none__"), result)
        context.build_data_docs(site_names=["run"])
        reports.publish_docs(flow_name, run_id, docs_dir)
    except Exception as exc:
        log.warning("the Data Docs of run %s were not written to %s: %s", run_id,
                    reports.run_dir(flow_name, run_id), exc)
