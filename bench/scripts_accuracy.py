#!/usr/bin/env python3
"""Accuracy of the what-if model on user scripts, out of sample, on single runs.

    .venv/bin/python bench/scripts_accuracy.py [--dir DIR] [--scripts examples,timm,lightning,dali]
                                               [--workers 1,2] [--cpus 1,2] [--cache 0]
                                               [--bw none,6M] [--rescore]

1. Measures, with harness.py (resumable, one prefix per script and worker count under
   DIR), scripts written in their framework's usual style, from tests/scripts/:
   `examples` (pytorch/examples imagenet: ImageFolder, RandomResizedCrop, a DataLoader
   with pinned memory, resnet18), `timm` (create_dataset + create_loader, test_resnet),
   `lightning` (a LightningModule and its Trainer), `dali` (NVIDIA's ImageNet example:
   `fn.readers.file` with `random_shuffle`, decoding on the CPU, `DALIClassificationIterator`;
   its worker count is DALI's `num_threads`; in the default set since stop 65, and never
   part of the tuning). Here they all train on the CPU (this
   machine has no GPU): every one is a CPU-trained script, whose step shares the cores
   with its DataLoader workers (`examples` is the issue's CPU-trained script: ImageFolder,
   RandomResizedCrop, resnet18 on the CPU). Each worker count is the script's own argument
   (`-j`, `--workers`); the harness's `-j` is not passed. The disk runs hold no page cache
   (`--cache 0`), so every epoch reads its files and the throttle binds in the steady
   epochs the rate is scored on (with an unlimited cache the steady epochs are all hits and
   a bandwidth would be held out in name only). Every held-out (disk) run is one
   measurement: the figures are scored on single runs. The cached runs at 2 CPUs, where the
   step shares the cores with the workers, are measured three times, as the harness does for
   any such job (`--shared-core-runs`; sweeps before it have one), and the fit pools them.
   `--images N` (960): the runs' length, 20 batches an epoch per 240 images. `--rescore`:
   score the runs recorded under DIR, measuring nothing.
2. Two splits, each held-out configuration predicted from its `HeldOut` alone:
   - leave-one-out (`whatif.validate`'s): each disk configuration of a script predicted by
     the model fitted on every other run of that script (every worker count and CPU count:
     a held-out configuration's workers, CPUs and bandwidth each measured elsewhere);
   - extrapolation: fitted on the fewest workers, unthrottled only; every disk run with
     more workers (a held-out worker count) or a throttle (a held-out bandwidth) predicted.
     CPU counts: a model fitted at the fewest CPUs is asked for the others, and a CPU-trained
     script's step is refused there (its time at another CPU count is not measured): the
     refusals are counted and named with their reason, never scored as predictions.
3. Prints each held-out run, then per split: median and maximum |error|, and the 90%
   intervals' coverage two-sided (measured below the interval, above it; over-coverage
   near 100% is a miss of the nominal level as under-coverage is). The figure, last.

Tuning grid against scoring grid: the model's rules and constants (PREP_BOUND, BINDS,
NOISE_FLOOR, the physical bounds) were tuned on bench/whatif_accuracy.py's grid, the
built-in job on the sim device; the interval width rule (SETTINGS.fit_sigma_scale, .untested_sigma)
on bench/interval_tuning.py's grid: recorded sweeps of the built-in job and an earlier
run of this bench (examples and timm, 1 CPU, unlimited cache, 4 MB/s). The script rules
(the CPU stretch, the interval's shape: sigma by what sets the rate, checked with
bench/interval_tuning.py on them) were chosen with four sweeps of this bench at its
defaults in view (`TUNED_ON`: seed 5, workers 1,2, none,6M): those are a tuning grid now.
The work between epochs and the main process's share of the workers' restart were chosen
with those and with the later scoring sweeps in view (seed 7, workers 1,3, none,5M; seed
9, workers 1,4, none,4M, twice): tuning grids too. So are the sweep whose miss named the
carried sharing of the cores (seed 11, workers 1,3, none,3M) and the one whose miss sized
its interval (`intervals.carried_sharing_rel`; seed 13, 960 images, workers 1,3, none,4.5M),
and the one whose 1-CPU misses the prep variants were scored on (seed 17, workers 1,2,
none,3.5M), and the one whose 1-CPU misses named the prep per regime (seed 19, workers 1,3,
none,5M), and the ones the prep per regime was scored on (seed 23, workers 1,2, none,4M;
seed 29, workers 1,3, none,3M, whose throttled misses named the throttle's banked budget),
and the one the banked budget was scored on (seed 31, workers 1,2, none,3.5M). The last
scoring grid was seed 37, workers 1,3, none,2.5M (bench14: the prep per regime landed on it
by a rule written before it was measured; its runs are the first without the code Pss read
all run long). bench15 (seed 41, workers 1,2, none,3M) scored the model as it then stood,
with nothing chosen on it; its over-predicted unthrottled disk runs at every core of the
machine name the next law to look at, which makes it a tuning grid from now on. bench16 (seed
43, workers 1,3, none,4M) scored the model and a stretch of the CPU work on storage tuned on
bench14/15, which its predeclared rule dropped (docs/design.md); it is a tuning grid now. So is
bench17 (seed 47, workers 1,2, none,5M), which scored that same model again, with nothing
chosen on it (leave-one-out 3.6/20.4/79%, extrapolation 2.1/15.9/83%), and bench18p (seed 53,
the jobs' OpenMP threads passive: a diagnostic), and bench19 (seed 59, workers 1,2, none,4M),
which scored the model of 14f36c0 with nothing chosen on it (leave-one-out 4.1/15.7/88%,
extrapolation 1.7/13.6/83%), and bench20 (seed 61, workers 1,3, none,3M), which scored the
model of 792dd65 (bench19's) with nothing chosen on it (leave-one-out 1.7/19.2/75%,
extrapolation 3.0/19.1/89%); the grids' own runs predict their disk runs no better than the
model (docs/design.md). bench21 (seed 67, workers 1,2, none,5M) scored the model of e96a176
(a run's rate counts each place in the epoch once; no rule chosen on it): leave-one-out
1.8/15.0/88%, extrapolation 0.9/23.1/83%. bench22 (seed 71, workers 1,3, none,4M) scored the
model of 6a8eec4 (bench21's, with the fetch bound beside it; no rule chosen on it):
leave-one-out 2.1/20.1/88%, extrapolation 0.6/27.8/89%; its largest miss, timm's 3 workers at
2 CPUs extrapolated from 1 (+27.8%, as bench21's +20.2% at 2), is a job whose cached run at
1 worker already kept 1.82 of 2 cores busy (the table's CPUs busy): the next law to look at.
That law (`laws.held_gain`: more workers than a count whose cached runs kept at least 90% of
their cores busy gain at most CPUs / cores busy) was written on bench21/22 and scored on
bench23 (seed 73, workers 1,2, none,3.5M; measured on b59844c, rescored on both models) by a
rule written before its results were read: leave-one-out 0.6/11.5/88% with and without it,
extrapolation 0.5/12.7/100% -> 0.5/9.9/100% (timm with 2 workers at 2 CPUs +12.7% -> +2.9%),
kept (938519b). bench24 (seed 79, workers 1,3, none,4.5M) scored the model of 5cfde5e with
nothing chosen on it: leave-one-out 1.4/5.6/100%, extrapolation 0.5/10.3/100% (noise floor
max 6.1%): both maxima under 15% for the second fresh grid running, and every interval held
its run, an over-coverage (a third of the rows are throttled, whose ±5-10% intervals around
errors under 1% never miss; over bench21-24, 9 of 96 leave-one-out runs and 5 of 72
extrapolated ones lay outside, 91% and 93%). Both are tuning grids now. bench25 (seed 83,
workers 1,2, none,5M; 5cfde5e, nothing chosen on it): leave-one-out 1.6/18.5/79%,
extrapolation 0.7/23.0/83%, noise floor max 13.8%, the model-free check max 28.1%; its misses
over 15% are at 1 CPU, where the runs of the two worker counts differ by 13-33% (examples at
5M/s: 79.2 with 1 worker, 59.7 with 2; timm unthrottled: 270.1 and 231.8), which no law of the
model has. A tuning grid now too: the prep where a one-thread step takes turns, held at its
floor where the runs solve it under (it was dropped for c_prep), was found on it (extrapolation
23.0 -> 19.7%). bench26 (seed 89, workers 1,3, none,3M; d494ff0, measured from a frozen worktree,
nothing chosen on it): leave-one-out 0.8/11.9/83%, extrapolation 0.6/11.9/94%, every target met
(noise floor max 21.6%); rescored with the floor rule, the same (no bench26 fit solved under the
floor). A tuning grid now. bench27 (seed 97, workers 1,2, none,4M; 90e1740, with the floor
rule, nothing chosen on it): leave-one-out 1.8/13.9/71%, extrapolation 0.5/14.0/89%: both
maxima under 15% again, the leave-one-out intervals too narrow (7 of 24 outside, all
unthrottled disk runs, 5 at 1 CPU, where the two worker counts' runs differ by 10-13%: lightning
216.9 against 190.4, timm 242.3 against 271.7). Over bench21-27 the 1-CPU cached runs' change
with the worker count foretells the unthrottled disk runs' (correlation 0.56 examples, 0.60
timm, 0.87 lightning), which the one prep where a one-thread step takes turns (a median over
the worker counts) does not carry: the next law to look at. A tuning grid now. That law (the
prep alone per worker count, branch prep-alone-per-workers, be0116c) was scored on bench28 (seed
101, workers 1,3, none,3.5M; measured on 98f6d5a) by a rule written before it: main
leave-one-out 0.6/14.7/92%, extrapolation 0.3/17.3/94%; with the law 0.9/25.8/88% and the same
extrapolation (lightning at 1 CPU, whose cached runs moved with the worker count the other way
from its disk runs there: +25.8%, -23.9%), so it stayed on its branch. A tuning grid now. Its
3-worker cached run at 1 CPU (141.0 samples/s, 238.0 with 1 worker) had the probe after it +70%
over the sweep's median: the machine itself slowed (bench25 and bench26 had one such reading
each, beside a run 20-40% slow), and the harness now measures such a run again (`--host-retries`,
74c6496). bench29 (seed 103, workers 1,2, none,4.5M; measured on 74c6496, one retry) met that
weather often: the probe's median went from 2.0 to 3.1 ms a decode and back three times in its
first ten minutes, one slowed run was measured again and slowed again (kept: 48.4 against
69.6-74.6 for its configuration's cached runs), and a slow spell inside examples' 2-worker
cached run at 1 CPU (its 20-batch chunks 3.3 s, then 5.8-6.9 s, then 3.1 s: 52.3 samples/s,
69.8 with 1 worker) had both probes normal. Main: leave-one-out 3.1/45.0/71%, extrapolation
0.6/23.1/94% (the model-free check: median 20.6%, max 49.1%); the prep alone per worker count,
scored on it by a rule written before its results were read: leave-one-out 0.9/44.9/75%, runs
over 15% 10 -> 7, extrapolation the same, so it was merged (8a00b9f). A tuning grid now.
bench30 (seed 107, workers 1,3, none,3M; measured on f4f63de, two retries, nothing chosen on
it): leave-one-out 1.8/30.6/92%, extrapolation 0.5/20.1/83%; noise floor max 29.4%, the
model-free check median 9.7%, max 45.8%. Its largest miss: examples' 1-worker disk run at 1 CPU
(78.8, predicted 54.7 from its cached run there, 57.2, the sweep's first run; both probes
normal). Then, by a rule written before its results were read, the 1-CPU cached runs were
measured twice more each (branch turns-repeats, 270d761: a step taking turns with its workers
measured --shared-core-runs times): they lay up to 22% from their first (timm 1 worker: 199.2,
then 257.9 and 253.5; examples 57.2, then 67.4 and 68.9). With them: leave-one-out
1.5/16.1/92%, extrapolation 0.5/25.4/94% (timm's 3 workers at 2 CPUs, extrapolated, -14.1% ->
-25.4%); runs over 15% 3 -> 4, so that branch stays unmerged. The repeats are kept under
DIR/*/turns-repeats/ (out of the runs main scores). A tuning grid now. bench31 (seed 109,
workers 1,2, none,5M; 543be8c, nothing chosen on it): leave-one-out 3.2/22.6/71%, extrapolation
0.3/23.7/83%. At 1 CPU the two worker counts' cached runs measured alike (lightning 232.8 and
233.4) and their unthrottled disk runs 174.8 and 214.9 (timm 262.7 and 212.3), the probes quiet:
each predicted from the other's disk/cached ratio, the leave-one-out errors are mirror images
(+22.6/-18.4%, -17.2/+20.3%). A tuning grid now. bench32 (seed 113, workers 1,3, none,4M;
41f2127) was stopped after examples: the first form of the work-speed retry (a run's own
transforms' CPU a sample against the whole sweep's median) measured two disk runs again for
nothing (64.2 then 63.8, 79.9 then 78.4): its disk runs' and 2-CPU runs' transforms cost 20-25%
more. A tuning grid now. bench33 (seed 127, workers 1,3, none,4M; 2cc3846, the retry judged
among a configuration's repeats): leave-one-out 1.5/21.2/79%, extrapolation 0.8/10.7/100%; one
run measured again after the sweep (lightning's 1-worker cached repeat at 2 CPUs: 207.3, its
transforms +21%, then 230.6). Scored with that run's first try in its place, by a rule written
before bench33 started: extrapolation max 11.2%, the rest the same, so the retry stays. Its
lightning 3-worker cached repeats at 2 CPUs were slow two times of three (transforms +43% and
+50% over the first, 344.9 against 281.9 and 272.5): a median of slowed runs does not flag
them (the next step: judge against the fastest repeat). A tuning grid now. bench34 (seed 131,
workers 1,2, none,3.5M; e1b8de2, nothing chosen on it, nothing measured again): leave-one-out
2.3/12.3/96% (all three targets met), extrapolation 0.5/15.9/94% (examples' 2-worker
unthrottled disk run at 1 CPU: 76.9 against 64.7). A tuning grid now (the fastest-repeat judge
was chosen with it and bench33 in view). bench35 (seed 137, workers 1,3, none,5M; 411a868, the
work-speed judge against a configuration's cheapest reading, 8%): leave-one-out 2.0/13.3/96%
(all three met), extrapolation 1.6/21.6/83% (examples' and timm's 3-worker unthrottled disk runs
extrapolated from 1 worker: +21.6%, +16.2%, +16.6%; at 1 CPU their transforms cost 17-36% more
CPU a sample with 3 workers than with 1, which the 1-worker fit cannot know); scored against the
median judge's runs rebuilt from the first tries by a rule written before it ran (1.8/11.8/92%,
1.6/21.5/83%, runs over 15% 3 and 3): kept. Its retries that landed dearer than their first try
named keeping each run's cheapest try, scored on bench36. A tuning grid now. bench36 (seed 139,
workers 1,2, none,4.5M; ed8b6c1, each run's cheapest try stored): leave-one-out 1.9/39.3/79%,
extrapolation 1.3/26.8/89%; against each run's last try (rebuilt by a rule written before it
ran) the same errors and coverage, the intervals narrower: kept. Its misses are a
configuration's only run: Lightning's 1-worker unthrottled disk run at 1 CPU read 0.897 ms a
sample in its transforms, +61% over its sweep's cached run at 1 CPU (161.3 samples/s against
222.2 with 2 workers: leave-one-out +39.3%, and the 2-worker runs extrapolated from it -26.8%
and -22.9%), which no repeat judges. A tuning grid now: the sweep-wide judge (branch sweep-outliers, 4bd5765:
a run more than 40% over its sweep's cheapest unthrottled reading measured again) was chosen on
bench32-36. bench37 (seed 149, workers 1,3, none,3.5M, lightning and timm only; 4bd5765, quiet
weather: no run measured again, so that branch was not exercised and stays unmerged):
leave-one-out 0.5/6.7/88% (all three met), extrapolation 1.1/23.9/92%. Its one miss: Lightning's
3-worker unthrottled disk run at 1 CPU extrapolated from 1 worker (175.6 against 217.5); with
every probe quiet and its 2-CPU repeats within 1%, its transforms cost 0.708-0.772 ms a sample at
1 CPU with 3 workers against 0.554-0.561 with 1: more workers on one core make the same work
dearer, by +28% for Lightning there and +6% for timm, which a 1-worker fit cannot know. A tuning
grid now. bench38 (seed 151, workers 1,2, none,4M; 795df30, nothing chosen on it):
leave-one-out 1.7/19.0/79%, extrapolation 0.5/10.6/100% (its maximum met; its intervals
over-covering). Its misses are Lightning's unthrottled disk runs at 2 CPUs (every core of the
machine): 200.9 and 276.9 samples/s against 230.8 and 329.6, 15-18% under the cached runs there
while at 1 CPU the two lie within 5%; noise floor median 2.9%, max 9.6%. bench39 (seed 157,
workers 1,3, none,3M; 795df30): leave-one-out 1.2/18.5/71%, extrapolation 0.7/20.2/100% (83%
as main stands, without the interval below). Two
rules were scored on them by rules written before bench38 ran. The sweep-wide judge (a1ee5ed)
measured examples' 1-worker unthrottled disk run at 2 CPUs again on bench39 (72.5, then 79.3
samples/s; predicted 79.2): runs over 15% 4 and 4, leave-one-out coverage 67% -> 71%: kept. An
interval of its own for more workers than CPUs where no fit run had more (sized on bench21-37:
their 70 extrapolated runs were off by -27..+24%, rms 12%, and their intervals held 71%) held
bench39's 6 such runs 6/6 against 3/6, but took the split from 83% to 100%: reverted (871e2ab).
The interval by side (0105f22: a rate the storage holds at 0.3 of the storage fit's sigma and a
throttle at face value at 0.5%, one the loop holds beside a step on the CPU 7% more) was tuned
on bench30, 31 and 33-39, each side of each split apart (bench/interval_tuning.py): tuning grids.
bench40 (seed 163, workers 1,2, none,3.5M; measured on d5f2115, nothing chosen on it) scored it
by a rule written before it ran: leave-one-out 1.7/28.7/88% -> 92%, extrapolation 0.8/31.2/83%
-> 94% (the runs the loop held 75% -> 83% and 50% -> 83%, the storage's 100% both): kept. Its
misses over 15% are one run: timm's 2-worker unthrottled disk run at 2 CPUs (214.6 samples/s,
predicted 276.1 and 281.6), whose transforms read +38% over its sweep's cheapest (the sweep-wide
judge's line is 40%) while its configuration's other runs read within 10%.
bench41 (seed 167, workers 1,3, none,4M; 68acd2b, nothing chosen on it; stopped during Lightning,
scored on examples and timm): leave-one-out 3.9/13.2/81% (75% at d5f2115), extrapolation
3.3/17.9/75% (83%): examples' 4 MB/s runs near the kink (about 60 samples/s throttled, 73
unthrottled) measured 3-11% under prediction while the storage side gave them +-1-3%. The storage
side's width near the kink is the next law to look at; a tuning grid now. The secant of
`intervals.loop_share` reaching the loop's own interval (ceea7fe: an interval near the kink starts
no higher than the loop's own lower end) was written on it. bench42 (seed 173, workers 1,2,
none,4M; measured on 0fbf8d3, nothing chosen on it) scored it by a rule written before it ran:
every held-out row the same with and without (its throttles held the rate at a third or less of
the loop's, no run near a kink), kept as the consistency fix it is: leave-one-out 2.8/20.4/75%
(Lightning's unthrottled disk runs +16..+20% at 2 CPUs, -18.6/+17.6% at 1 CPU, where its two worker
counts' runs predict each other), extrapolation 0.5/14.1/89%. A tuning grid now. bench43 (seed
179, workers 1,2, none,10M; ceea7fe) put examples' throttle at its kink: with and without the
secant's reach the same runs covered (four intervals 0.1-1.2 samples/s wider; examples' 10 MB/s runs
at 2 CPUs lay 17% under their loop's rate, past the reach), so it stayed: leave-one-out
2.8/14.5/71%, extrapolation 1.4/21.7/72%, the storage side 40% and 60% of 10: its throttled runs off
by 1.0-2.7%, one sign per script and throttle, inside +-1-1.6%. A floor under the storage's part of
sigma (SETTINGS.storage_sigma_floor, 1.25%: bench42/43's 44 such runs lay within 2.0-2.1% nine times
in ten) was chosen on bench42/43 (tuning grids now) and scored on bench44 (seed 181, workers 1,2,
none,7M; measured on 4d7123c) by a rule written before it ran: leave-one-out 1.7/18.6/67% -> 96%
(the storage side 42% -> 100% of 12), extrapolation 0.8/13.3/94% both: kept (1186311). A tuning
grid now. bench45 (seed 191, workers 1,2, none,5M; 4d7123c) scored it again by the same rule, written
before it ran: leave-one-out 1.9/23.7/79% -> 88% (storage 75% -> 92%), but extrapolation
0.5/18.1/94% -> 100% (storage 92% -> 100%: its throttles at face value had lain within 0.5%, inside
the 0.5% throttle_sigma's +-1%, and the floor doubled them): the rule failed, the floor was
reverted. A tuning grid now. The floor for a fitted efficiency alone (0ab195c, tuned on
bench42-45 rescored: leave-one-out 83/75/96/88%, extrapolation 89/72/94/94%) was scored on bench46
(seed 193, workers 1,2, none,6M; measured on 0ab195c) by a rule written before it ran: leave-one-out
2.0/14.6/92%, extrapolation 0.8/9.5/89%, both splits within every bound (its parent rescored: the
same coverage, 16 storage-side intervals narrower): kept. Its largest misses: examples' 1-worker
unthrottled disk run at 1 CPU (-14.6%, leave-one-out) and Lightning's 2-worker one at 2 CPUs
(+10.8%, the same sign as on bench38-45); noise floor median 2.1%, max 18.4%.
bench47 (seed 197, workers 1,2, none,8M; 0ab195c, nothing chosen on it, a replication): leave-one-out
3.2/17.4/96%, extrapolation 1.2/18.9/83%: coverage within 80-97% on both splits, the maximum not
(timm's 1-worker unthrottled disk run at 2 CPUs +17.4%, examples' 2-worker one at 1 CPU +18.9%
extrapolated: 120.1 samples/s unthrottled against 119.0 at 8 MB/s, its synthetic run at 1 CPU
241.9 where bench46's was 177.1); the model-free ratio's maximum on the same runs 17.5%.
bench48 (seed 199, workers 1,3, none,4.5M; 0ab195c, nothing chosen on it): leave-one-out
1.1/16.6/88%, extrapolation 0.5/10.0/94%: coverage within bounds, the leave-one-out maximum not
(examples' 3-worker unthrottled disk run at 2 CPUs +16.6%; Lightning's and timm's unthrottled
disk runs at 1 CPU, where the 1- and 3-worker runs alone give the read cost, +13.7/+14.1% and
-11.3/-11.3%, each pair predicting the other the wrong way round). Over bench46-48 on 0ab195c:
leave-one-out 66 of 72 inside (91.7%), extrapolation 48 of 54 (88.9%), medians 1.1-3.2%, maxima
14.6/9.5, 17.4/18.9 and 16.6/10.0%.
bench49 (seed 211, workers 1,2, none,5.5M; 03e2b72) scored a law by a rule written before it ran
(docs/design.md: a validation pass's cold re-reads paying the read cost at the epoch's end): main
leave-one-out 1.5/17.5/96%, extrapolation 0.8/11.6/83%; with the law 1.5/17.5/96% and
0.8/17.4/83%, the extrapolation's maximum up: not kept. For main, a replication (nothing of main
chosen on it). Its maximum, examples' 2-worker unthrottled disk run at 1 CPU (-17.5%), measured
171.0 samples/s against 151.6 cached: disk faster than memory by 13%, the machine's noise.
bench50 (seed 223, workers 1,3, none,6.5M; 03e2b72, nothing chosen on it, a replication):
leave-one-out 1.4/17.1/79%, extrapolation 1.0/13.4/89%. Over bench46-50 on main: leave-one-out 108
of 120 inside (90.0%, median 1.6%, max 17.5%), extrapolation 79 of 90 (87.8%, median 0.9%, max
18.9%).
bench51 (seed 229, workers 1,3, none,5M; 8d915c6) scored a law by a rule written before it ran
(docs/design.md, law L: a read that misses holds its worker for a fitted wait): main
leave-one-out 1.2/18.8/88%, extrapolation 0.7/25.5/94%; with the law 1.2/16.3/92% and
0.7/26.6/94%, the extrapolation's maximum up 1.1 points: not kept (it had failed on the tuning
grids already). Law L2, the wait fitted only where the runs show its sign, was kept by the
same rule written before bench52 (seed 233, workers 1,2, none,6M; 94a8d99) ran: main
leave-one-out 2.2/20.4/83%, extrapolation 0.7/20.0/94%; L2 2.2/18.5/92% and 0.7/19.9/94%. A
tuning grid now.
For main, bench51 was a replication; its extrapolation maximum is timm's 3-worker
unthrottled disk run at 2 CPUs (+25.5%, inside its interval). A tuning grid now. Over bench46-51 on main:
leave-one-out 129 of 144 inside (89.6%, max 18.8%), extrapolation 96 of 108 (88.9%, max 25.5%).
Law V2 (a validation pass's misses cost its workers their wait and CPU) was kept by the same
rule written before bench53 (seed 239, workers 1,2, none,5M; 47ddf80) ran: main leave-one-out
0.7/13.3/96%, extrapolation 0.7/22.3/89%; V2 0.7/11.4/96% and 0.7/22.3/89%. bench53's
extrapolation maximum is timm's 2-worker unthrottled disk run at 2 CPUs fitted on 1 worker
(-22.3%). A tuning grid now. bench54 (seed 241, workers 1,3, none,4M; fddd3da, with law V2), a
replication with nothing chosen on it: leave-one-out 1.2/14.4/92%, extrapolation 0.4/13.0/94%,
both splits within issue 24's figures (without law V2 the same); its maxima are examples'
3-worker unthrottled disk runs (-14.4% at 1 CPU, +13.0% at 2). bench55 (seed 251, workers 1,2,
none,4.5M; ab6012d), another replication: leave-one-out 1.5/13.9/88%, extrapolation 0.6/11.5/94%,
both within the figures too. Over bench53-55 with law V2: leave-one-out 66 of 72 inside (91.7%,
max 14.4%), extrapolation 50 of 54 (92.6%, max 22.3%: bench53's timm run above). bench56 (seed
257, workers 1,2, none,5.5M; 829e135), a replication: leave-one-out 1.1/18.5/92% (examples'
1-worker unthrottled disk run at 1 CPU, -18.5%, measured faster than its cached runs),
extrapolation 0.5/13.7/94%. bench57 (seed 263, workers 1,3, none,4M; 2f944fd): leave-one-out
1.2/11.1/92%, extrapolation 0.3/9.0/94%. Over bench53-57: 110 of 120 and 84 of 90 inside.
bench58 (seed 269, workers 1,2, none,4.5M; measured with stop 59's rule R1, scored on main's runs
among them): leave-one-out 1.2/17.3/88%, extrapolation 0.2/6.3/94%; over bench53-58 131 of 144
and 101 of 108 inside. R1 (1-CPU cached runs three times) was not kept (docs/design.md). bench59
(seed 271, workers 1,3, none,5M; 7eac0d5): leave-one-out 1.2/7.7/96%, extrapolation 0.7/23.6/94%
(timm's 3 workers at 2 CPUs fitted on 1); over bench53-59 154 of 168 and 118 of 126 inside.
bench60 (seed 277, workers 1,2, none,3.5M; 47acb10): leave-one-out 1.3/13.2/100%, extrapolation
0.4/6.6/100%; over bench53-60 178 of 192 and 136 of 144 inside. bench61 (seed 281, workers 1,2,
none,4M; a1fd37a): leave-one-out 1.1/14.2/96%, extrapolation 0.5/13.6/89%; over bench53-61 201 of
216 and 152 of 162 inside. bench62 (seed 283, workers 1,3, none,5M; 5042cbe): leave-one-out
1.5/17.6/88%, extrapolation 0.5/16.5/89%; over bench53-62 222 of 240 and 168 of 180 inside.
bench63 (seed 293, workers 1,2, none,6M; 3eb92ce): leave-one-out 2.3/22.3/88% (timm's 1-worker
unthrottled disk run at 2 CPUs, left out), extrapolation 0.7/11.8/94%; over bench53-63 243 of
264 and 185 of 198 inside. bench64 (seed 307, workers 1,2, none,5M; cedf461): leave-one-out
0.9/13.1/96%, extrapolation 0.5/10.2/94%; over bench53-64 266 of 288 and 202 of 216 inside.
bench65 (seed 311, workers 1,2, none,4M; 03408ea): leave-one-out 1.3/13.1/96%, extrapolation
0.3/13.9/94%. bench66 (seed 313, workers 1,3, none,5M; 03408ea): leave-one-out 1.2/11.4/92%,
extrapolation 0.6/37.7/94% (timm's 3 workers at 2 CPUs fitted on 1, inside its interval).
bench67 (seed 317, workers 1,2, none,4.5M; e2a312f): leave-one-out 1.1/24.2/88% (examples' 2
workers at 1 CPU, left out), extrapolation 0.4/14.8/94%; over bench53-67 332 of 360 and 253 of
270 inside. bench68 (seed 331, workers 1,2, none,4M; 9d72b10, on a day the host ran slow in
spells: 28 runs measured again): leave-one-out 5.1/22.2/58%, extrapolation 3.5/32.7/28% (its
model-free check: median 11.0%, max 20.6%); over bench53-68 346 of 384 and 258 of 288 inside.
`--repeats-in DIR...`: other sweeps of the same grid; `--noise-repeats N`: the unthrottled
cached and disk runs at the most CPUs measured N times more (the harness's --repeats, under
DIR/noise; about 5 minutes per script and worker count at N = 5). Either prints how far a
single run lies from the mean of its configuration's other runs: the error a model that knew
each configuration's mean rate would make on single runs, the floor no prediction scored on
one run beats. On 2 cores, a CPU-trained script at 2 CPUs (every core) lies up to 28-33%
from its mean (`--dir /tmp/dsa-scripts-bench7 --rescore --noise-repeats 5`, examples and
timm): the 15% maximum is below that floor there. With DIR/noise present, the extrapolation
split is also scored on every held-out single run of the sweep and of DIR/noise, fitted on
the sweep's single runs and then with the fit configurations' repeats in the fit too.

Runtime: 3 scripts x 2 CPU counts x (synthetic, cached, 2 disk runs at the fewest workers;
cached, 2 disk at the others: the step is measured once), 42 runs, and the cached runs at 2
CPUs twice more (12), then the fits (two scripts at once): about 30 minutes on 2 quiet cores
at 960 images (10 at 240); `--rescore` the fits alone.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dsanalyze import store  # noqa: E402
from dsanalyze.analysis import stalls  # noqa: E402
from dsanalyze.config import Mode, format_bytes  # noqa: E402
from dsanalyze.dataset import scan_dataset  # noqa: E402
from dsanalyze.errors import ConfigError  # noqa: E402
from dsanalyze.jobs.datasets import make_dataset  # noqa: E402
from dsanalyze.records import RunResult  # noqa: E402
from dsanalyze.whatif import api as whatif  # noqa: E402
from dsanalyze.whatif.heldout import HeldOut  # noqa: E402
from dsanalyze.whatif.validation import check, configurations  # noqa: E402

# seed 5: other images than the interval tuning grid's earlier run of this bench (seed 3).
# 960 images: 80 batches an epoch, a steady window of 160 (the sweeps before bench8 had 240
# images, 40: their cached runs at every core lay up to 33% from their mean, at 960 up to 26%)
IMAGES, CLASSES, SIZE, JITTER, SEED = 960, 4, (400, 300), 0.2, 5
# the runs whose misses the model's script rules (the CPU stretch, the interval's width) were
# chosen on: this bench at its defaults (seed 5, workers 1,2, none,6M), four sweeps
TUNED_ON = ("/tmp/dsa-scripts-bench{,2,3,4} (seed 5, workers 1,2, bandwidths none,6M), "
            "/tmp/dsa-scripts-bench5 (seed 7, workers 1,3, none,5M), "
            "/tmp/dsa-scripts-bench6{,b} (seed 9, workers 1,4, none,4M), "
            "/tmp/dsa-scripts-bench7 (seed 11, workers 1,3, none,3M), "
            "/tmp/dsa-scripts-bench8 (seed 13, 960 images, workers 1,3, none,4.5M), "
            "/tmp/dsa-scripts-bench9 (seed 17, 960 images, workers 1,2, none,3.5M), "
            "/tmp/dsa-scripts-bench10 (seed 19, 960 images, workers 1,3, none,5M), "
            "/tmp/dsa-scripts-bench11 (seed 23, 960 images, workers 1,2, none,4M), "
            "/tmp/dsa-scripts-bench12 (seed 29, 960 images, workers 1,3, none,3M), "
            "/tmp/dsa-scripts-bench13 (seed 31, 960 images, workers 1,2, none,3.5M), "
            "/tmp/dsa-scripts-bench14 (seed 37, 960 images, workers 1,3, none,2.5M), "
            "/tmp/dsa-scripts-bench15 (seed 41, 960 images, workers 1,2, none,3M), "
            "/tmp/dsa-scripts-bench16 (seed 43, 960 images, workers 1,3, none,4M), "
            "/tmp/dsa-scripts-bench17 (seed 47, 960 images, workers 1,2, none,5M), "
            "/tmp/dsa-scripts-bench18p (seed 53, 960 images, workers 1,3, none,3.5M, "
            "OMP_WAIT_POLICY=PASSIVE), "
            "/tmp/dsa-scripts-bench19 (seed 59, 960 images, workers 1,2, none,4M), "
            "/tmp/dsa-scripts-bench20 (seed 61, 960 images, workers 1,3, none,3M), "
            "/tmp/dsa-scripts-bench21 (seed 67, 960 images, workers 1,2, none,5M), "
            "/tmp/dsa-scripts-bench22 (seed 71, 960 images, workers 1,3, none,4M), "
            "/tmp/dsa-scripts-bench23 (seed 73, 960 images, workers 1,2, none,3.5M), "
            "/tmp/dsa-scripts-bench24 (seed 79, 960 images, workers 1,3, none,4.5M), "
            "/tmp/dsa-scripts-bench25 (seed 83, 960 images, workers 1,2, none,5M), "
            "/tmp/dsa-scripts-bench26 (seed 89, 960 images, workers 1,3, none,3M), "
            "/tmp/dsa-scripts-bench27 (seed 97, 960 images, workers 1,2, none,4M), "
            "/tmp/dsa-scripts-bench28 (seed 101, 960 images, workers 1,3, none,3.5M), "
            "/tmp/dsa-scripts-bench29 (seed 103, 960 images, workers 1,2, none,4.5M), "
            "/tmp/dsa-scripts-bench30 (seed 107, 960 images, workers 1,3, none,3M), "
            "/tmp/dsa-scripts-bench31 (seed 109, 960 images, workers 1,2, none,5M), "
            "/tmp/dsa-scripts-bench32 (seed 113, 960 images, workers 1,3, none,4M, examples "
            "only), /tmp/dsa-scripts-bench33 (seed 127, 960 images, workers 1,3, none,4M), "
            "/tmp/dsa-scripts-bench34 (seed 131, 960 images, workers 1,2, none,3.5M), "
            "/tmp/dsa-scripts-bench35 (seed 137, 960 images, workers 1,3, none,5M), "
            "/tmp/dsa-scripts-bench36 (seed 139, 960 images, workers 1,2, none,4.5M), "
            "/tmp/dsa-scripts-bench37 (seed 149, 960 images, workers 1,3, none,3.5M, "
            "lightning and timm), /tmp/dsa-scripts-bench38 (seed 151, workers 1,2, none,4M), "
            "/tmp/dsa-scripts-bench39 (seed 157, workers 1,3, none,3M), "
            "/tmp/dsa-scripts-bench40 (seed 163, workers 1,2, none,3.5M), "
            "/tmp/dsa-scripts-bench41 (seed 167, workers 1,3, none,4M, examples and timm), "
            "/tmp/dsa-scripts-bench42 (seed 173, workers 1,2, none,4M), "
            "/tmp/dsa-scripts-bench43 (seed 179, workers 1,2, none,10M), "
            "/tmp/dsa-scripts-bench44 (seed 181, workers 1,2, none,7M), "
            "/tmp/dsa-scripts-bench45 (seed 191, workers 1,2, none,5M), "
            "/tmp/dsa-scripts-bench46 (seed 193, workers 1,2, none,6M), "
            "/tmp/dsa-scripts-bench47 (seed 197, workers 1,2, none,8M), "
            "/tmp/dsa-scripts-bench48 (seed 199, workers 1,3, none,4.5M), "
            "/tmp/dsa-scripts-bench49 (seed 211, workers 1,2, none,5.5M), "
            "/tmp/dsa-scripts-bench50 (seed 223, workers 1,3, none,6.5M), "
            "/tmp/dsa-scripts-bench51 (seed 229, workers 1,3, none,5M), "
            "/tmp/dsa-scripts-bench52 (seed 233, workers 1,2, none,6M) and "
            "/tmp/dsa-scripts-bench53 (seed 239, workers 1,2, none,5M)")
SCRIPTS = {  # name: (file under tests/scripts, its own arguments; {w}: its worker count)
    "examples": ("train_examples.py", ("-j", "{w}", "-b", "12", "--epochs", "3",
                                       "--img-size", "32")),
    "timm": ("train_timm.py", ("-j", "{w}", "-b", "12", "--epochs", "3")),
    "lightning": ("train_lightning.py", ("--workers", "{w}", "--batch-size", "12",
                                         "--max-epochs", "3")),
    # NVIDIA's ImageNet example: -j is DALI's num_threads; decoding on the CPU
    "dali": ("train_dali.py", ("-j", "{w}", "-b", "12", "--epochs", "3", "--crop-size", "32",
                               "--dali_cpu")),
}
# three epochs: a disk run's steady rate (the epochs after the cold first) is two epochs of
# 20 batches, where two epochs left one (the earlier run's single runs lay 10% apart)
HARNESS = ["--epochs", "3", "--warmup", "2", "--resume",
           "--no-plots", "--no-advice"]
TARGET_MEDIAN_PCT, TARGET_MAX_PCT, COVERAGE_LOW, COVERAGE_HIGH = 5.0, 15.0, 0.80, 0.97


def measure(base: Path, scripts: list[str], workers: list[int], cpus: str, bw: str,
            cache: str, seed: int = SEED, images: int = IMAGES) -> None:
    """Every script at every worker count: one harness sweep each, under `base` (its `images`
    drawn with `seed`)."""
    data = base / "data"
    if not data.is_dir() or len(scan_dataset(data).files) != images:
        make_dataset(data, images, CLASSES, SIZE, JITTER, seed)
    for name in scripts:
        file, args = SCRIPTS[name]
        for w in workers:
            prefix = base / f"{name}-w{w}"
            argv = [sys.executable, str(REPO / "harness.py"), "--data", str(data), "--prefix",
                    str(prefix), "--cpus", cpus, "--cache", cache, "--storage-bw", bw,
                    # the step does not depend on the workers: measured once, with the fewest
                    "--modes", "synthetic,cached,disk" if w == min(workers) else "cached,disk",
                    *HARNESS,
                    str(REPO / "tests" / "scripts" / file), str(data),
                    *(a.format(w=w) for a in args)]
            t0 = time.monotonic()
            rc = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL).returncode
            print(f"  {name} with {w} worker(s): harness exit status {rc} "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)


def recorded(base: Path, scripts: list[str] | None = None) -> dict[str, list[RunResult]]:
    """The completed runs under `base` per script (its prefixes NAME-wW, every worker count),
    `scripts` only if given."""
    out: dict[str, list[RunResult]] = {}
    for prefix in sorted(p for p in base.glob("*-w*") if (p / "runs").is_dir()):
        name = prefix.name.rsplit("-w", 1)[0]
        if scripts is None or name in scripts:
            out.setdefault(name, []).extend(r for r in store.load_runs(prefix)
                                            if r.ok and r.ranks)
    return out


def _workers(run: RunResult) -> int:
    return HeldOut.of(run).job.workers


def _extrapolation_fit(runs: list[RunResult]) -> Callable[[RunResult], bool]:
    """The extrapolation split's fit rule: the fewest workers of `runs`, unthrottled."""
    fewest = min(map(_workers, runs))
    return lambda r: _workers(r) == fewest and r.spec.resources.storage_read_bps is None


def extrapolation(runs: list[RunResult]) -> tuple[list[whatif.Check], list[str]]:
    """Fitted on the fewest workers unthrottled; the other worker counts and the throttles
    predicted; and fitted at the fewest CPUs, the other CPU counts asked (refusals named)."""
    fit_runs = list(filter(_extrapolation_fit(runs), runs))
    fitted = {id(r) for r in fit_runs}
    held = [c for c in configurations([r for r in runs if r.mode is Mode.DISK])
            if id(c[0]) not in fitted]
    checks, refused = [], []
    model = whatif.fit(fit_runs)
    for config in held:
        try:
            checks.append(check(model, config, "extrapolation"))
        except ConfigError as e:
            refused.append(f"{config[0].run_id}: {e}")
    one = min(HeldOut.of(r).cpus for r in runs)
    at_one = whatif.fit([r for r in runs if HeldOut.of(r).cpus == one])
    for config in configurations([r for r in runs if r.mode is Mode.DISK
                                  and HeldOut.of(r).cpus != one]):
        try:
            checks.append(check(at_one, config, "extrapolation"))
        except ConfigError as e:
            refused.append(f"{config[0].run_id} [{_workers(config[0])} workers], fitted at "
                           f"{one} CPU(s): {str(e).split(':')[0]}")
    return checks, refused


def extrapolation_on_repeats(runs: list[RunResult], again: list[RunResult], pooled: bool
                             ) -> list[whatif.Check]:
    """The extrapolation split, every held-out disk run of the sweep and of `again` (DIR/noise:
    configurations measured again, the harness's repeats) scored alone (a single run each,
    never a mean of repeats); `pooled`: `again`'s runs of the fit configurations in the fit
    too, else the sweep's single runs alone."""
    fitted = _extrapolation_fit(runs)
    model = whatif.fit([r for r in (runs + again if pooled else runs) if fitted(r)])
    return [check(model, (r,), "extrapolation") for r in runs + again
            if r.mode is Mode.DISK and not fitted(r) and HeldOut.of(r).cpus in model.measured_cpus]


def splits(runs: list[RunResult]) -> tuple[list[whatif.Check], list[whatif.Check], list[str]]:
    """One script's held-out runs: leave-one-out's, extrapolation's, and its refusals."""
    return [*whatif.validate(runs).splits[0].checks], *extrapolation(runs)


def grid_text(by_script: dict[str, list[RunResult]]) -> str:
    """The grid the recorded disk runs span: scripts, workers, CPUs, caches, bandwidths."""
    disk = [r for runs in by_script.values() for r in runs if r.mode is Mode.DISK]
    knobs = {"workers": {HeldOut.of(r).job.workers for r in disk},
             "CPUs": {HeldOut.of(r).cpus for r in disk},
             "cache": {r.spec.resources.cache.spec for r in disk},
             "bandwidths": {r.spec.resources.storage_read_bps or 0 for r in disk}}
    knobs["bandwidths"] = {format_bytes(b) + "/s" if b else "none"
                           for b in sorted(knobs["bandwidths"])}
    return f"scripts {','.join(by_script)}, " + ", ".join(
        f"{k} {','.join(map(str, sorted(v)))}" for k, v in knobs.items())


def _unbound(r: RunResult) -> bool:
    """A disk run whose throttle does not bind: none, or its bytes read a second under half
    of it (the bytes the job read, not the files': a loader may read a sample twice)."""
    bps = r.spec.resources.storage_read_bps
    return bps is None or (r.io.read_bytes or 0) / max(r.duration_s, 1e-9) < bps / 2


def noise(runs: list[RunResult]) -> list[float]:
    """What no model can beat: the spread, (max - min) / mean, of the disk runs of one worker
    count and CPU count whose throttles do not bind: the same configuration for the model,
    measured minutes apart."""
    groups: dict[tuple[int, int], list[float]] = {}
    for r in runs:
        rate = stalls.run_rate(r).rate_sps
        if r.mode is Mode.DISK and rate and _unbound(r):
            held = HeldOut.of(r)
            groups.setdefault((held.job.workers, held.cpus), []).append(rate)
    return [100 * (max(v) - min(v)) / statistics.fmean(v) for v in groups.values() if len(v) > 1]


def own_runs(runs: list[RunResult]) -> list[float]:
    """|error| in % of a prediction without a model, from the grid's own runs: each
    unthrottled disk run of one worker count and CPU count as its cached runs' mean rate times
    the disk/cached ratio the other worker counts measured at that CPU count (their mean). It
    knows the held-out configuration's own cached rate, which the model fits but does not
    copy: what a fit that carried every cached run's residual to its disk run would score."""
    rates: dict[tuple[int, int, Mode], list[float]] = {}
    for r in runs:
        rate = stalls.run_rate(r).rate_sps
        if rate and (r.mode is Mode.CACHED or (
                r.mode is Mode.DISK and r.spec.resources.storage_read_bps is None)):
            held = HeldOut.of(r)
            rates.setdefault((held.cpus, held.job.workers, r.mode), []).append(rate)
    ratio = {(c, w): statistics.fmean(disk) / statistics.fmean(rates[(c, w, Mode.CACHED)])
             for (c, w, mode), disk in rates.items()
             if mode is Mode.DISK and (c, w, Mode.CACHED) in rates}
    out = []
    for cpus, w in ratio:
        others = [x for (c, o), x in ratio.items() if c == cpus and o != w]
        if others:
            predicted = statistics.fmean(rates[(cpus, w, Mode.CACHED)]) * statistics.fmean(others)
            out += [100 * abs(predicted / x - 1) for x in rates[(cpus, w, Mode.DISK)]]
    return out


def repeat_noise(dirs: list[Path], scripts: list[str], mode: Mode = Mode.DISK) -> list[float]:
    """How far each `mode` run of a configuration measured more than once (in other sweeps
    of the same grid, or as the harness's repeats: `--noise-repeats`) lies from the mean of
    its other runs, |run / mean - 1| in %: the error on single runs of a model that knew
    each configuration's mean rate, the noise floor a prediction scored on one run cannot
    beat (a disk run whose throttle binds is left out: the throttle sets its rate). A
    configuration is the script, its workers and the run's resources."""
    rates: dict[tuple[str, int, str], list[float]] = {}
    for d in dirs:
        for name, runs in recorded(d, scripts).items():
            for r in runs:
                if r.mode is mode and _unbound(r) and (rate := stalls.run_rate(r).rate_sps):
                    key = (name, HeldOut.of(r).job.workers, r.spec.resources.key)
                    rates.setdefault(key, []).append(rate)
    return [100 * abs(x / statistics.fmean(v[:i] + v[i + 1:]) - 1)
            for v in rates.values() if len(v) > 1 for i, x in enumerate(v)]


def measure_noise(base: Path, scripts: list[str], workers: list[int], cpus: str,
                  repeats: int) -> None:
    """The unthrottled cached and disk runs of every script and worker count at `cpus`, each
    `repeats` times (the harness's --repeats, interleaved), under `base`/noise: how far a
    single run lies from itself measured again."""
    data = base / "data"
    for name in scripts:
        file, args = SCRIPTS[name]
        for w in workers:
            argv = [sys.executable, str(REPO / "harness.py"), "--data", str(data), "--prefix",
                    str(base / "noise" / f"{name}-w{w}"), "--cpus", cpus, "--cache", "0",
                    "--storage-bw", "none", "--modes", "cached,disk", "--repeats", str(repeats),
                    *HARNESS, str(REPO / "tests" / "scripts" / file), str(data),
                    *(a.format(w=w) for a in args)]
            rc = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL).returncode
            print(f"  noise: {name} with {w} worker(s) at {cpus} CPU(s), {repeats} repeats: "
                  f"harness exit status {rc}", flush=True)


def scores(checks: list[whatif.Check]) -> dict[str, float]:
    errors = [abs(c.error_pct) for c in checks]
    below = sum(c.measured_sps < c.low_sps for c in checks)
    above = sum(c.measured_sps > c.high_sps for c in checks)
    sides = {side: [c.covered for c in checks if c.spread is not None and c.spread.side == side]
             for side in ("storage", "loop")}
    return {"n": len(checks), "median": statistics.median(errors), "max": max(errors),
            "coverage": 1 - (below + above) / len(checks), "below": below, "above": above,
            **{f"{side}_n": len(v) for side, v in sides.items()},
            **{f"{side}_coverage": sum(v) / len(v) for side, v in sides.items() if v}}


def _line(name: str, s: dict[str, float]) -> str:
    ok = s["median"] <= TARGET_MEDIAN_PCT and s["max"] <= TARGET_MAX_PCT and \
        COVERAGE_LOW <= s["coverage"] <= COVERAGE_HIGH
    return (f"{name}: median |error| {s['median']:.1f}%, max {s['max']:.1f}% over {s['n']:.0f} "
            f"single runs; 90% intervals cover {s['coverage']:.0%} ({s['below']:.0f} measured "
            f"below, {s['above']:.0f} above; by what holds the rate: "
            + ", ".join(f"{side} {s[f'{side}_coverage']:.0%} of {s[f'{side}_n']:.0f}"
                        for side in ("storage", "loop") if f"{side}_coverage" in s)
            + f") [{'meets' if ok else 'misses'} <= "
            f"{TARGET_MEDIAN_PCT:g}% / {TARGET_MAX_PCT:g}% / "
            f"{COVERAGE_LOW:.0%}-{COVERAGE_HIGH:.0%}]")


def _print(name: str, checks: list[whatif.Check]) -> None:
    for c in checks:
        print(f"  {name:10s} {c.split:13s} {c.run_id:36s} measured {c.measured_sps:6.1f}  "
              f"predicted {c.predicted_sps:6.1f} [{c.low_sps:6.1f}, {c.high_sps:6.1f}] "
              f"{c.error_pct:+6.1f}%{'' if c.covered else ' OUTSIDE'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/dsa-scripts-bench"))
    ap.add_argument("--scripts", default="examples,timm,lightning,dali")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--cpus", default="1,2")
    ap.add_argument("--bw", default="none,6M")
    ap.add_argument("--cache", default="0")
    ap.add_argument("--seed", type=int, default=SEED, help="the images' seed (a fresh grid)")
    ap.add_argument("--images", type=int, default=IMAGES,
                    help="the dataset's images (the runs' length: 20 batches an epoch per 240; "
                         "the sweeps before bench8 had 240)")
    ap.add_argument("--rescore", action="store_true",
                    help="measure no sweep: score the runs under --dir (--noise-repeats aside)")
    ap.add_argument("--repeats-in", type=Path, nargs="*", default=[],
                    help="other sweeps of the same grid: print the single-run noise floor")
    ap.add_argument("--noise-repeats", type=int, default=0,
                    help="measure the unthrottled runs at the most CPUs this many times more "
                         "(under DIR/noise): the single-run noise floor")
    ns = ap.parse_args(argv)
    scripts, workers = ns.scripts.split(","), [int(w) for w in ns.workers.split(",")]
    if not ns.rescore:
        measure(ns.dir, scripts, workers, ns.cpus, ns.bw, ns.cache, ns.seed, ns.images)
    if ns.noise_repeats > 1:
        measure_noise(ns.dir, scripts, workers, ns.cpus.split(",")[-1], ns.noise_repeats)
    by_script = recorded(ns.dir, ns.scripts.split(","))
    loo, extra, refused, spread, own = [], [], [], [], []
    with ProcessPoolExecutor(2) as pool:  # the fits of two scripts at once, on 2 cores
        for name, (held, ex, no) in zip(by_script, pool.map(splits, by_script.values())):
            spread += noise(by_script[name])
            own += own_runs(by_script[name])
            loo += held
            extra += ex
            refused += [f"{name} {x}" for x in no]
            _print(name, [*held, *ex])
    for x in refused:
        print(f"  refused: {x}")
    print("\ntuning grid: bench/whatif_accuracy.py (the model's rules: built-in job, sim "
          "device), bench/interval_tuning.py (the interval width) and, for the script rules, "
          f"{TUNED_ON}; these runs under {ns.dir}: {grid_text(by_script)}")
    print(f"refused (a CPU-trained step at an unmeasured CPU count): {len(refused)}")
    if spread:
        print(f"run-to-run noise: disk runs the model cannot tell apart (throttles that do not "
              f"bind) lie apart by median {statistics.median(spread):.0f}%, max "
              f"{max(spread):.0f}% of their mean over {len(spread)} group(s)")
    noise_dir = ns.dir / "noise"
    sweeps = [ns.dir, *ns.repeats_in, *([noise_dir] if noise_dir.is_dir() else [])]
    for mode, what in ((Mode.CACHED, "a cached run (the fit's)"),
                       (Mode.DISK, "a disk run whose throttle does not bind")):
        floor = repeat_noise(sweeps, scripts, mode)
        if floor:
            print(f"single-run noise floor: {what} lies from the mean of its configuration's "
                  f"other runs (other sweeps, repeats) by median {statistics.median(floor):.1f}%, "
                  f"max {max(floor):.1f}% over {len(floor)} run(s)")
    unthrottled = [abs(c.error_pct) for c in loo if c.run_id.split(" ")[0].endswith("bwnone")]
    if own and unthrottled:
        print(f"without a model: each unthrottled disk run from its own cached runs x the other "
              f"worker counts' disk/cached ratio at its CPU count is off by median "
              f"{statistics.median(own):.1f}%, max {max(own):.1f}% over {len(own)} run(s); the "
              f"model's leave-one-out on those runs: median {statistics.median(unthrottled):.1f}%, "
              f"max {max(unthrottled):.1f}% over {len(unthrottled)}")
    again = recorded(noise_dir, scripts) if noise_dir.is_dir() else {}
    if again:
        for pooled, how in ((False, "fitted on the sweep's single runs"),
                            (True, "its fit configurations' runs in DIR/noise in the fit too")):
            checks = [c for name, more in again.items() if name in by_script
                      for c in extrapolation_on_repeats(by_script[name], more, pooled)]
            print(_line(f"extrapolation to the sweep's and DIR/noise's held-out runs, {how}",
                        scores(checks)))
    lines = [_line("leave-one-out", scores(loo)) if loo else "leave-one-out: nothing predicted",
             _line("extrapolation", scores(extra)) if extra else "extrapolation: nothing predicted"]
    print("figure: " + "; ".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
