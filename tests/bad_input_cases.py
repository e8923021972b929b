"""The bad-input corpus (issue 17): ``(id, arguments, words the one-line error must hold)``.

Arguments are one string split on spaces; ``{t}`` is the case's folder (holding the files
of tests/bad_input_files.py), ``{r}`` the repository root, ``{run}`` a copy of a finished
tiny real run. Every case must exit 2, print one ``Error:`` line holding the words, no
traceback, and leave every file as it was (tests/test_bad_inputs.py).
"""

from __future__ import annotations

CAL = "--calibration {r}/sim/data/gsm8k.json"
SIM = f"sim {CAL} --steps 2 --out {{t}}/o"
SWEEP = f"sweep {CAL} --steps 2 --out {{t}}/o"
STAB = "stability --steps 5 --seeds 1 --out {t}/o"
TB = "{r}/tests/data/verl_tb/q3b_fsdp_base"
VERL = f"calibrate verl-tb {TB}"
SCORES = "{r}/tests/data/qwen25_math_cot_100/scores.jsonl"
GROUPS = "{r}/tests/data/groups/real_sync"
RS = "real sync --out {t}/o --warm-start-steps 0 --steps 1"

OPTIONS = [
    ("no-such-command", "nosuch", "No such command"),
    # sim: options
    ("sim-steps-0", f"{SIM} --steps 0", "'--steps': 0 is not in the range"),
    ("sim-prompts-neg", f"{SIM} --prompts -1", "'--prompts'"),
    ("sim-workers-0", f"{SIM} --workers 0", "'--workers'"),
    ("sim-steps-huge", f"{SIM} --steps 99999999999999999999999", "'--steps': 99999999999999999999999 is not in the range 1<=x<=1000000"),
    ("sim-prompts-huge", f"{SIM} --prompts 100001", "1<=x<=100000"),
    ("sim-workers-huge", f"{SIM} --workers 100001", "'--workers': 100001 is not in the range 1<=x<=100000"),
    ("sweep-workers-huge", f"{SWEEP} --workers 2,100001", "'--workers': item '100001'"),
    ("stab-steps-huge", f"{STAB} --steps 1000001", "1<=x<=1000000"),
    ("real-prompts-huge", f"{RS} --prompts 100001", "'--prompts': 100001 is not in the range 1<=x<=100000"),
    ("sim-seed-neg", f"{SIM} --seed -1", "'--seed'"),
    ("sim-seed-word", f"{SIM} --seed one", "'--seed'"),
    ("sim-tp-0", f"{SIM} --tp 0", "'--tp'"),
    ("sim-model", f"{SIM} --model gpt-5", "'--model'"),
    ("sim-dataset-0", f"{SIM} --dataset-size 0", "'--dataset-size'"),
    ("sim-static-0", f"{SIM} --controllers static:0", "static:G"),
    ("sim-controller", f"{SIM} --controllers bogus", "bogus"),
    ("sim-pipeline", f"{SIM} --pipeline warp:3", "warp:3"),
    ("sim-fast-async", f"{SIM} --engine fast --pipeline one-step-off", "one-step-off"),
    ("sim-engine", f"{SIM} --engine gpu", "'--engine'"),
    ("sim-scenario", "sim --scenario nosuch --out {t}/o", "nosuch"),
    # sim: reward options
    ("sim-pass-rate-high", f"{SIM} --pass-rate fixed:1.5", "fixed:1.5"),
    ("sim-pass-rate-file", f"{SIM} --pass-rate {{t}}/missing.json", "missing.json"),
    ("sim-gbf-alone", f"{SIM} --gen-batch-factor 2", "needs --dynamic-sampling"),
    ("sim-gbf-nan", f"{SIM} --dynamic-sampling --gen-batch-factor nan", "'--gen-batch-factor'"),
    ("sim-gbf-low", f"{SIM} --dynamic-sampling --gen-batch-factor 0.5", "'--gen-batch-factor'"),
    ("sim-mgb-neg", f"{SIM} --dynamic-sampling --max-gen-batches -1", "'--max-gen-batches'"),
    ("sim-target-high", f"{SIM} --target-reward 2", "'--target-reward'"),
    ("sim-target-nan", f"{SIM} --target-reward nan", "'--target-reward'"),
    # sweep
    ("sweep-prompts-word", f"{SWEEP} --prompts 4,x", "'--prompts': item 'x'"),
    ("sweep-workers-dup", f"{SWEEP} --workers 2,2", "repeated item(s) 2"),
    ("sweep-prompts-0", f"{SWEEP} --prompts 0,4", "'--prompts': item '0'"),
    ("sweep-prompts-empty", f"{SWEEP} --prompts ,", "expected a comma-separated list"),
    ("sweep-mns-neg", f"{SWEEP} --max-num-seqs -5", "'--max-num-seqs'"),
    ("sweep-seeds-0", f"{SWEEP} --seeds 0", "'--seeds'"),
    ("sweep-seeds-both", f"{SWEEP} --seeds 2 --seed-list 1,2", "not both"),
    ("sweep-seed-list-dup", f"{SWEEP} --seed-list 1,1", "'--seed-list'"),
    ("sweep-steps-0", f"{SWEEP} --steps 0", "'--steps'"),
    ("sweep-fast-kv", f"{SWEEP} --model qwen2.5-3b --gpu h100", "--no-kv-cache"),
    # stability
    ("stab-S-dup", f"{STAB} --S 1,1", "'--S': repeated item(s) 1"),
    ("stab-S-neg", f"{STAB} --S -1", "'--S'"),
    ("stab-S-empty", f"{STAB} --S ,", "'--S'"),
    ("stab-lr-nan", f"{STAB} --lr nan", "'--lr': item 'nan'"),
    ("stab-lr-inf", f"{STAB} --lr 1e-3,inf", "'--lr': item 'inf'"),
    ("stab-lr-0", f"{STAB} --lr 0", "'--lr'"),
    ("stab-lr-dup", f"{STAB} --lr 1e-3,0.001", "repeated item(s)"),
    ("stab-steps-0", f"{STAB} --steps 0", "'--steps'"),
    ("stab-seeds-0", f"{STAB} --seeds 0", "'--seeds'"),
    ("stab-prompts-0", f"{STAB} --prompts 0", "'--prompts'"),
    ("stab-batch-0", f"{STAB} --batch 0", "'--prompts' / '--batch'"),
    # calibrate / validate options
    ("verl-group-0", f"{VERL} --group-size 0 --out {{t}}/x.json", "'--group-size'"),
    ("verl-cap-0", f"{VERL} --max-response-length 0 --out {{t}}/x.json", "'--max-response-length'"),
    ("verl-mns-0", f"{VERL} --max-num-seqs 0 --out {{t}}/x.json", "'--max-num-seqs'"),
    ("verl-replicates-0", f"{VERL} --replicates 0 --out {{t}}/x.json", "'--replicates'"),
    ("verl-tau-1", f"{VERL} --tau 1 --out {{t}}/x.json", "'--tau'"),
    ("verl-delta-nan", f"{VERL} --delta nan --out {{t}}/x.json", "'--delta'"),
    ("verl-prompts-0", f"{VERL} --prompts 0 --out {{t}}/x.json", "'--prompts'"),
    ("servegen-prompts-0", "calibrate servegen {t}/empty --prompts 0 --out {t}/x.json", "'--prompts'"),
    ("learning-dispersion-nan", "calibrate learning --verl-tb " + TB + " --dispersion nan --out {t}/x.json", "'--dispersion'"),
    ("validate-fit-1", f"validate verl-tb {TB} --fit-steps 1 --out {{t}}/o", "'--fit-steps'"),
    ("validate-groups-fit-1", f"validate groups {GROUPS} --fit-steps 1 --out {{t}}/o", "'--fit-steps'"),
    ("validate-groups-tau", f"validate groups {GROUPS} --fit-steps 5 --tau 1 --out {{t}}/o", "--tau"),
    ("validate-groups-no-k", f"validate groups {GROUPS} --out {{t}}/o", "--fit-steps: required without --held-out"),
    ("validate-groups-from", f"validate groups {GROUPS} --fit-steps 5 --from-step 3 --out {{t}}/o", "--from-step: needs --held-out"),
    ("validate-groups-from-late", f"validate groups {GROUPS} --held-out {GROUPS} --from-step 99 --out {{t}}/o", "field 'step': no step >= --from-step 99"),
    ("validate-groups-window-lognormal", f"validate groups {GROUPS} --fit-steps 5 --step-window 3 --out {{t}}/o", "--step-window: needs --length-model empirical"),
    ("run-spread-one-run", f"validate run-spread {GROUPS} --out {{t}}/o", "need >= 2 runs"),
    ("run-spread-tau", f"validate run-spread {GROUPS} {GROUPS} --tau 1 --out {{t}}/o", "'--tau'"),
    ("run-spread-from-late", f"validate run-spread {GROUPS} {GROUPS} --from-step 99 --out {{t}}/o", "field 'step': no step >= 99"),
    ("calibrate-groups-window-lognormal", f"calibrate groups {GROUPS} --step-window 3 --out {{t}}/x.json", "--step-window: needs --length-model empirical"),
    ("validate-groups-window-0", f"validate groups {GROUPS} --fit-steps 5 --length-model empirical --step-window 0 --out {{t}}/o", "'--step-window'"),
    # real
    ("real-lr-inf", f"{RS} --lr inf", "'--lr': 'inf' is not a finite number"),
    ("real-lr-nan", f"{RS} --lr nan", "'--lr'"),
    ("real-lr-neg", f"{RS} --lr -1", "'--lr'"),
    ("real-steps-0", f"{RS} --steps 0", "'--steps'"),
    ("real-tau-1", f"{RS} --tau 1", "'--tau'"),
    ("real-two-taus", f"{RS} --tau 3 --controller sagc:tau=4", "--tau and --controller"),
    ("real-capacity", f"{RS} --controller static:100", "capacity"),
    ("real-engine-mode", f"{RS} --engine-mode paged", "'--engine-mode'"),
    ("real-target-0", f"{RS} --target-accuracy 0", "'--target-accuracy'"),
    ("real-mgb-neg", f"{RS} --max-gen-batches -1", "'--max-gen-batches'"),
    ("real-seed-neg", f"{RS} --seed -2", "'--seed'"),
    ("real-vllm-share-high", f"{RS} --engine vllm --vllm-memory-share 1.5", "'--vllm-memory-share'"),
    ("real-vllm-share-0", f"{RS} --engine vllm --vllm-memory-share 0", "'--vllm-memory-share'"),
    ("vllm-grid-no-config", "calibrate vllm-grid --model {t} --out {t}/c.json", "no config.json"),
    ("real-stab-S-dup", "real stability --S 2,2 --out {t}/o", "'--S'"),
    ("real-stab-lr-nan", "real stability --lr nan --out {t}/o", "'--lr'"),
    ("real-stab-seeds-0", "real stability --seeds 0 --out {t}/o", "'--seeds'"),
    ("real-stab-jobs-0", "real stability --jobs 0 --out {t}/o", "'--jobs'"),
    ("real-spread-G", "real task-spread --G 2 --out {t}/x.json", "'--G'"),
    ("real-progress-target", "real progress {t}/empty --target-accuracy 2 --out {t}/o", "'--target-accuracy'"),
    # compare
    ("idle-tau-1", "compare idle --real {t}/empty --tau 1 --out {t}/o", "'--tau'"),
    ("idle-draws-0", "compare idle --real {t}/empty --draws 0 --out {t}/o", "'--draws'"),
    ("learning-target", "compare learning --fit {t}/empty --real {t}/empty --target-accuracy 1.5 --out {t}/o", "'--target-accuracy'"),
    ("collapse-evals", "compare collapse --real {t}/grid.csv --max-evals 1 --out {t}/o", "'--max-evals'"),
]  # fmt: skip

FILES = [
    # calibration / scenario JSON
    ("cal-missing", "sim --calibration {t}/nope.json --out {t}/o", "nope.json"),
    ("cal-not-json", "sim --calibration {t}/not_json.json --out {t}/o", "not valid JSON"),
    ("cal-list", "sim --calibration {t}/list.json --out {t}/o", "field 'format'"),
    ("cal-binary", "sim --calibration {t}/binary.json --out {t}/o", "binary.json"),
    ("cal-dir", "sim --calibration {t}/cal_dir.json --out {t}/o", "cal_dir.json"),
    ("cal-nan", "sim --calibration {t}/cal_nan.json --out {t}/o", "NaN is not valid JSON"),
    ("cal-inf", "sim --calibration {t}/cal_inf.json --out {t}/o", "Infinity is not valid JSON"),
    ("cal-format", "sim --calibration {t}/cal_format.json --out {t}/o", "field 'format'"),
    ("cal-version", "sim --calibration {t}/cal_version.json --out {t}/o", "field 'version'"),
    ("cal-mu-str", "sim --calibration {t}/cal_mu_str.json --out {t}/o", "field lengths.mu"),
    ("cal-cap-0", "sim --calibration {t}/cal_cap0.json --out {t}/o", "field lengths.max_response_length"),
    ("cal-sigma-neg", "sim --calibration {t}/cal_sigma_neg.json --out {t}/o", "field lengths.sigma_within"),
    ("cal-lengths-list", "sim --calibration {t}/cal_lengths_list.json --out {t}/o", "field 'lengths'"),
    ("cal-kind", "sim --calibration {t}/cal_kind.json --out {t}/o", "field lengths.kind"),
    ("cal-no-mu", "sim --calibration {t}/cal_no_mu.json --out {t}/o", "missing field lengths.'mu'"),
    ("cal-cost-unknown", "sim --calibration {t}/cal_cost_unknown.json --out {t}/o", "bogus_s"),
    ("cal-cost-str", "sim --calibration {t}/cal_cost_str.json --out {t}/o", "field cost.a_s"),
    ("cal-cost-list", "sim --calibration {t}/cal_cost_list.json --out {t}/o", "field 'cost'"),
    ("cal-prompt-neg", "sim --calibration {t}/cal_prompt_neg.json --out {t}/o", "field prompt_tokens"),
    ("cal-prompt-frac", "sim --calibration {t}/cal_prompt_frac.json --out {t}/o", "field prompt_tokens"),
    ("cal-tau-low", "sim --calibration {t}/cal_tau_low.json --out {t}/o", "field defaults.tau"),
    ("cal-prompts-str", "sim --calibration {t}/cal_prompts_str.json --out {t}/o", "field defaults.prompts"),
    ("cal-target-high", "sim --calibration {t}/cal_target_high.json --out {t}/o", "defaults.target_reward"),
    ("cal-workers-0", "sim --calibration {t}/cal_workers0.json --out {t}/o", "field engine.n_workers"),
    ("cal-engine-list", "sim --calibration {t}/cal_engine_list.json --out {t}/o", "field 'engine'"),
    ("cal-passrate", "sim --calibration {t}/cal_passrate_spec.json --out {t}/o", "pass_rate.spec"),
    ("cal-empirical-str", "sim --calibration {t}/cal_empirical_str.json --out {t}/o", "lengths.values"),
    ("sweep-cal-nan", "sweep --calibration {t}/cal_nan.json --out {t}/o", "NaN is not valid JSON"),
    ("servegen-empty", "calibrate servegen {t}/empty --prompts 4 --out {t}/x.json", "no chunk-*-dataset.json"),
    ("pass-rate-file-torn", f"{SIM} --pass-rate {{t}}/not_json.json", "not_json.json"),
    ("pass-rate-file-list", f"{SIM} --pass-rate {{t}}/list.json", "list.json"),
    ("pass-rate-file-nan", f"{SIM} --pass-rate {{t}}/cal_nan.json", "cal_nan.json"),
    ("learning-real-missing", "calibrate learning --real {t}/nope --out {t}/x.json", "nope"),
    ("learning-real-bad-trace", "calibrate learning --real {t}/run_bad_trace --out {t}/x.json", "run_bad_trace"),
    # event files and per-sample logs
    ("verl-missing-run", "calibrate verl-tb {t}/nope --out {t}/x.json", "nope"),
    ("verl-empty-run", "calibrate verl-tb {t}/empty --out {t}/x.json", "empty"),
    ("verl-garbage-events", "calibrate verl-tb {t}/tb_garbage --out {t}/x.json", "tb_garbage"),
    ("validate-only-files", "validate verl-tb {t}/notes.txt --out {t}/o", "no run folder"),
    ("validate-garbage-events", "validate verl-tb {t}/tb_garbage --out {t}/o", "tb_garbage"),
    ("pass-rate-missing", "calibrate pass-rate {t}/nope.jsonl --out {t}/x.json", "nope.jsonl"),
    ("pass-rate-torn", "calibrate pass-rate {t}/scores.jsonl --out {t}/x.json", "scores.jsonl"),
    ("pass-rate-field", "calibrate pass-rate {t}/scores_nofield.jsonl --out {t}/x.json", "score"),
    ("groups-missing", "calibrate groups {t}/nope.parquet --out {t}/x.json", "nope.parquet"),
    ("groups-bad-csv", "calibrate groups {t}/groups.csv --out {t}/x.json", "groups.csv"),
    # traces of real runs
    ("idle-no-run", "compare idle --real {t}/nope --out {t}/o", "nope"),
    ("idle-empty-run", "compare idle --real {t}/empty --out {t}/o", "empty"),
    ("idle-bad-trace", "compare idle --real {t}/run_bad_trace --out {t}/o", "run_bad_trace"),
    ("progress-empty", "real progress {t}/empty --out {t}/o", "empty"),
    ("collapse-grid", "compare collapse --real {t}/grid.csv --steps 10 --out {t}/o", "grid.csv"),
    ("learning-fit-missing", "compare learning --fit {t}/nope --real {t}/empty --target-accuracy 0.5 --out {t}/o", "nope"),
    # a new user's trial (issue 30)
    ("groups-garbage-parquet", "calibrate groups {t}/garbage.parquet --out {t}/x.json", "garbage.parquet: not a readable parquet file"),
    ("groups-cut-parquet", "calibrate groups {t}/cut.parquet --out {t}/x.json", "cut.parquet: not a readable parquet file"),
    ("sim-updates-nan", "sim --updates-per-batch nan --out {t}/o", "'nan' is not a valid integer"),
    ("sim-updates-above-batch", "sim --prompts 4 --updates-per-batch 8 --out {t}/o", "must divide the prompt batch B = 4"),
    ("groups-token-count-as-id", "calibrate groups {t}/tokens_as_id.jsonl --out {t}/x.json", "line 1: field 'input' holds numbers (the prompt's token count), not a prompt id"),
    ("groups-unclosed-quote-csv", "calibrate groups {t}/unclosed_quote.csv --out {t}/x.json", "unclosed_quote.csv: not a readable CSV file"),
    ("pass-rate-bad-csv", "calibrate pass-rate {t}/unclosed_quote.csv --out {t}/x.json", "unclosed_quote.csv: not a readable CSV file"),
    ("groups-not-utf8", "calibrate groups {t}/latin1.jsonl --out {t}/x.json", "latin1.jsonl: line 2: not UTF-8 text"),
    ("run-spread-cut-parquet", "validate run-spread {t}/cut.parquet {t}/cut.parquet --out {t}/o", "cut.parquet: not a readable parquet file"),
    ("validate-groups-cut-parquet", "validate groups {t}/cut.parquet --fit-steps 5 --out {t}/o", "cut.parquet: not a readable parquet file"),
    ("pass-rate-dup-idx", "calibrate pass-rate {t}/scores_dup.jsonl --out {t}/x.json", "line 3: field 'idx': prompt '0' of step 0 repeats line 1"),
    ("groups-empty-dir", "calibrate groups {t}/empty --out {t}/x.json", "a folder without rollouts.parquet"),
    ("run-spread-empty-dir", "validate run-spread {t}/empty {t}/empty --out {t}/o", "a folder without rollouts.parquet"),
    ("collapse-empty-dir", "compare collapse --real {t}/empty --out {t}/o", "empty/stability.csv: no stability grid"),
    ("idle-sim-folder", "compare idle --real {t}/sim_run --out {t}/o", "written by `rolloutlab sim`"),
    ("learning-sim-folder", "compare learning --fit {t}/sim_run --real {t}/sim_run --target-accuracy 0.5 --out {t}/o", "written by `rolloutlab sim`"),
    ("resume-sim-folder", "real sync --resume --out {t}/sim_run", "written by `rolloutlab sim`"),
    ("sweep-unfinished-grid", f"{SWEEP} --out {{t}}/grid_cut", "1 of 4 finished points of another, unfinished grid"),
    ("verl-missing", "sim --verl-config {t}/nope.yaml --out {t}/o", "nope.yaml: no such file"),
    ("verl-torn", "sim --verl-config {t}/verl_torn.yaml --out {t}/o", "verl_torn.yaml: line 3: not valid YAML"),
    ("verl-list", "sim --verl-config {t}/verl_list.yaml --out {t}/o", "expected a YAML mapping of verl fields, got list"),
    ("verl-type", "sim --verl-config {t}/verl_type.yaml --out {t}/o", "verl_type.yaml: field data.train_batch_size: expected int, got 'many'"),
    ("verl-tp", "scenario from-verl {t}/verl_tp.yaml --out {t}/x.json", "TP 4 does not divide the 6 generation GPUs"),
    ("verl-gpu-unknown-model", "sim --verl-config {r}/tests/data/verl_config/ppo_trainer_split.yaml --gpu h100 --out {t}/o", "'~/models/deepseek-llm-7b-chat' is not a roofline model"),
    ("from-verl-out-notes", "scenario from-verl {r}/tests/data/verl_config/ppo_trainer_split.yaml --out {t}/notes.txt", "notes.txt"),
    # studies for report
    ("report-idle-summary", "report {t}/study_idle --out {t}/o", "idle_summary.json: malformed summary"),
    ("report-config-torn", "report {t}/study_cfg --out {t}/o", "config.json: not readable JSON"),
    ("report-config-list", "report {t}/study_list --out {t}/o", "expected a JSON object"),
    ("report-collapse-summary", "report {t}/study_coll --out {t}/o", "collapse_summary.json"),
    ("report-not-study", "report {t}/study_none --out {t}/o", "no figure"),
    ("report-same-name", "report {t}/a/same {t}/b/same --out {t}/o", "would both be written to same.html"),
    ("report-missing", "report {t}/nope --out {t}/o", "nope"),
]  # fmt: skip

OUTPUTS = [
    ("sim-out-file", f"sim {CAL} --out {{t}}/a_file", "a_file"),
    ("sim-out-under-file", f"sim {CAL} --out {{t}}/a_file/sub", "a_file"),
    ("sim-out-other", f"sim {CAL} --out {{t}}/other_run", "already holds the results of `stability`"),
    ("sim-out-junk", f"sim {CAL} --out {{t}}/junk", "already holds other files"),
    ("sweep-out-other", f"sweep {CAL} --out {{t}}/other_run", "already holds"),
    ("stab-out-junk", "stability --out {t}/junk", "already holds other files"),
    ("stab-out-under-file", "stability --out {t}/a_file/sub", "a_file"),
    ("verl-out-notes", f"{VERL} --out {{t}}/notes.txt", "notes.txt: exists and is not a calibration JSON"),
    ("verl-out-dir", f"{VERL} --out {{t}}/empty", "empty"),
    ("verl-out-under-file", f"{VERL} --out {{t}}/a_file/x.json", "a_file"),
    ("groups-out-notes", f"calibrate groups {GROUPS} --out {{t}}/notes.txt", "refusing to overwrite"),
    ("pass-rate-out-notes", f"calibrate pass-rate {SCORES} --lengths-field response_chars --out {{t}}/notes.txt", "notes.txt"),
    ("validate-out-other", f"validate verl-tb {TB} --out {{t}}/other_run", "already holds"),
    ("real-out-other", f"{RS} --out {{t}}/other_run", "already holds"),
    ("real-resume-nothing", "real sync --resume --out {t}/empty", "nothing to resume"),
    ("real-resume-junk", "real sync --resume --out {t}/junk", "nothing to resume"),
    ("report-out-other", "report {t}/a/same --out {t}/other_run", "already holds"),
    ("idle-out-file", "compare idle --real {r}/tests/data/groups/real_sync --out {t}/a_file", "a_file"),
    ("real-out-under-file", f"{RS} --out {{t}}/a_file/sub", "a_file is not a writable folder"),
    ("async-out-under-file", "real async --steps 1 --out {t}/a_file/sub", "a_file"),
    ("real-stab-out-under-file", "real stability --out {t}/a_file/sub", "a_file"),
    ("spread-out-under-file", "real task-spread --out {t}/a_file/x.json", "a_file"),
    ("task-lengths-out-under-file", "real task-lengths --out {t}/a_file/x.png", "a_file"),
    ("report-out-under-file", "report {t}/a/same --out {t}/a_file/sub", "a_file"),
    ("sweep-out-under-file", f"sweep {CAL} --out {{t}}/a_file/sub", "a_file"),
    ("spread-out-notes", "real task-spread --out {t}/notes.txt", "not a task-spread JSON"),
    ("spread-out-other-json", "real task-spread --out {t}/list.json", "refusing to overwrite"),
    ("task-lengths-out-notes", "real task-lengths --out {t}/notes.txt", "not a PNG image"),
    ("task-lengths-out-dir", "real task-lengths --out {t}/empty", "empty"),
]  # fmt: skip

CHECKPOINTS = [
    ("resume-corrupt-weights", "real sync --resume --out {run}", "sha256 does not match"),
    ("resume-gap", "real sync --resume --out {run}", "step(s) 0"),
    ("resume-config-torn", "real sync --resume --out {run}", "not a rolloutlab real-sync config"),
    ("resume-config-inf", "real sync --resume --out {run}", "Infinity is not valid JSON"),
    ("resume-config-lr-neg", "real sync --resume --out {run}", "lr must be > 0"),
    ("resume-other-lr", "real sync --resume --lr 0.5 --out {run}", "but the run was made with"),
    ("resume-manifest", "real sync --resume --out {run}", "manifest"),
]  # fmt: skip
"""Cases on a copy of a finished tiny real run, damaged by ``DAMAGE[id]`` first."""

FILES += [
    # per-sample logs people have (issue 29)
    ("groups-dump-empty-step", "validate groups {t}/verl_dump_gap --fit-steps 2 --out {t}/o", "3.jsonl: line 1: field 'step': step 3 has no samples"),
    ("groups-ids-reused", "calibrate groups {t}/ids_reused.jsonl --out {t}/x.json", "ids_reused.jsonl: line 3: field 'index': id '0' names another prompt"),
    ("groups-above-cap", "calibrate groups {t}/above_cap.jsonl --out {t}/x.json", "above_cap.jsonl: line 2: field 'response_length': length 513 above the response cap 512"),
    ("groups-negative-length", "validate groups {t}/neg_len.jsonl --fit-steps 2 --out {t}/o", "neg_len.jsonl: line 1: field 'response_length': length -4 is not an integer >= 1"),
    ("groups-console-log", "calibrate groups {t}/console.jsonl --out {t}/x.json", "console.jsonl: line 1: not valid JSON"),
    ("groups-tensorboard-file", "calibrate groups {r}/tests/data/verl_tb/q3b_fsdp_base --out {t}/x.json", "a folder without rollouts.parquet or {step}.jsonl"),
]  # fmt: skip

FILES += [
    ("groups-above-option-cap", "validate groups {r}/tests/data/groups/real_sync --fit-steps 20 --max-response-length 40 --out {t}/o", "line 649: field 'length': length 43 above the response cap 40 of --max-response-length"),
]  # fmt: skip

FILES += [
    ("replay-no-sim", "validate replay {r}/tests/data/groups/real_sync --sim {t}/empty --out {t}/o", "--sim: "),
    ("replay-dump-gap", "validate replay {t}/verl_dump_gap --sim {r}/tests/data/groups/real_sync --out {t}/o", "step 3 has no samples"),
]  # fmt: skip

FILES += [
    ("groups-ambiguous-ids", "calibrate groups {t}/two_ids.jsonl --out {t}/x.json", "two_ids.jsonl: line 2: field 'index': groups the samples of step 0 otherwise than field 'uid'"),
]  # fmt: skip
