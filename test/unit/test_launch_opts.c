/* test_launch_opts.c — dtrun's command line: torchrun's names, both spellings,
 * values, errors that name the option, the job file's launch: section. */
#include <stdlib.h>
#include <string.h>

#include "lib/launch/launch_opts.h"
#include "test/unit/check.h"

static launch_opts o;
static char err[1024];
static char words[64][256];
static char *argv_buf[65];

/* Parses "dtrun " + line, split at spaces ('~' stands for an empty word). */
static int parse(const char *line)
{
    launch_opts_free(&o);
    launch_opts_defaults(&o);
    err[0] = 0;
    int argc = 0;
    argv_buf[argc++] = "dtrun";
    char copy[2048];
    snprintf(copy, sizeof copy, "%s", line);
    char *save = NULL;
    for (char *w = strtok_r(copy, " ", &save); w && argc < 64; w = strtok_r(NULL, " ", &save)) {
        snprintf(words[argc], sizeof words[argc], "%s", strcmp(w, "~") ? w : "");
        argv_buf[argc] = words[argc];
        argc++;
    }
    argv_buf[argc] = NULL;
    return launch_opts_parse(&o, argc, argv_buf, err, sizeof err);
}

static int parse_finish(const char *line)
{
    if (parse(line) != 0) return -1;
    return launch_opts_finish(&o, err, sizeof err);
}

static int has(const char *needle) { return strstr(err, needle) != NULL; }

static void test_spellings(void)
{
    CHECK(parse("--nproc-per-node=4 job.yaml") == 0 && !strcmp(o.nproc_spec, "4") &&
              (o.set & LAUNCH_SET_NPROC), "--nproc-per-node=4");
    CHECK(parse("--nproc_per_node 4 job.yaml") == 0 && !strcmp(o.nproc_spec, "4"), "--nproc_per_node 4");
    CHECK(parse("--nnodes=1:4 --node_rank=2 --rdzv-endpoint=h:7 --rdzv_id=abc job.yaml") == 0 &&
              o.nnodes_min == 1 && o.nnodes_max == 4 && o.node_rank == 2 && o.rdzv_port == 7 &&
              !strcmp(o.rdzv_host, "h") && !strcmp(o.rdzv_id, "abc"),
          "mixed spellings: nnodes %d:%d node_rank %d port %d", o.nnodes_min, o.nnodes_max, o.node_rank,
          o.rdzv_port);
    CHECK(parse("--max_restarts 3 --monitor-interval=0.5 --role trainer --local_addr 10.0.0.2 job.yaml") == 0 &&
              o.max_restarts == 3 && o.monitor_interval == 0.5 && !strcmp(o.role, "trainer") &&
              !strcmp(o.local_addr, "10.0.0.2"),
          "--max_restarts, --monitor-interval, --role, --local_addr");
    CHECK(parse("--master_addr=node1 --master-port 29500 --standalone --dry-run --print_config job.yaml") == 0 &&
              !strcmp(o.master_addr, "node1") && o.master_port == 29500 && o.standalone && o.dry_run &&
              o.print_config,
          "--master-addr, --master-port, booleans");
    CHECK(parse("job.yaml --nproc-per-node=2") == 0 && !strcmp(o.nproc_spec, "2") &&
              !strcmp(o.job_path, "job.yaml"),
          "options may follow the job file");
    CHECK(parse("--plan --hardware h100-sxm --format=json --top 3 j") == 0 && o.plan &&
              !strcmp(o.hardware, "h100-sxm") && o.format_json && o.top == 3, "--plan, --hardware, --format, --top");
    CHECK(parse("--format=xml j") != 0 && has("not text or json"), "--format xml: %s", err);
    CHECK(parse("--plan --headroom 7.5% j") == 0 && o.headroom.set && o.headroom.fraction == 0.075 &&
              o.headroom.bytes == 0, "--headroom 7.5%%: a share of each rank's memory");
    CHECK(parse("--plan --headroom=2GiB j") == 0 && o.headroom.set && o.headroom.bytes == 2147483648.0,
          "--headroom=2GiB: an amount");
    CHECK(parse("--plan --headroom 512MB j") == 0 && o.headroom.bytes == 512e6, "--headroom 512MB");
    CHECK(parse("--plan --headroom 0% j") == 0 && o.headroom.set && o.headroom.fraction == 0 && o.headroom.bytes == 0,
          "--headroom 0%%: none kept");
    CHECK(parse("--plan --headroom 5 j") != 0 && has("--headroom: '5' needs a unit"), "--headroom 5: %s", err);
    CHECK(parse("--plan --headroom 5GB/s j") != 0 && has("unknown unit 'GB/s'"), "--headroom 5GB/s: %s", err);
    CHECK(parse("--plan --headroom 100% j") != 0 && has("below 100%"), "--headroom 100%%: %s", err);
    CHECK(parse("--plan --headroom -1% j") != 0 && has("not a share of memory"), "--headroom -1%%: %s", err);
    CHECK(parse("--version") == 0 && o.version, "--version");
    CHECK(parse("-h") == 0 && o.help, "-h");
    launch_opts_defaults(&o);
    CHECK(!strcmp(o.nproc_spec, "auto") && o.nnodes_max == 1 && o.rdzv_port == 29400 &&
              !strcmp(o.role, "default") && o.max_restarts == 0 && o.node_rank == -1,
          "defaults: nproc auto, 1 node, port 29400, role default");
}

static void test_unknown(void)
{
    CHECK(parse("--nproc-per-nod=8 job.yaml") != 0 &&
              !strcmp(err, "unknown option '--nproc-per-nod'; did you mean '--nproc-per-node'?"),
          "typo suggestion: %s", err);
    CHECK(parse("--nproc_per_nod 8 job.yaml") != 0 && has("did you mean '--nproc_per_node'?"),
          "suggestion in the user's spelling: %s", err);
    CHECK(parse("--max-restart=1 job.yaml") != 0 && has("'--max-restarts'"), "--max-restart: %s", err);
    CHECK(parse("--frobnicate job.yaml") != 0 && has("unknown option '--frobnicate'") && !has("did you mean"),
          "no suggestion for a far word: %s", err);
    CHECK(parse("-x job.yaml") != 0 && has("unknown option '-x'"), "unknown short option: %s", err);
    CHECK(parse("--standalone=1 job.yaml") != 0 && has("takes no value"), "flag with a value: %s", err);
    CHECK(parse("job.yaml --nnodes") != 0 && has("--nnodes needs a value"), "missing value: %s", err);
    CHECK(parse("a.yaml b.yaml") != 0 && has("unexpected argument 'b.yaml'"), "two job files: %s", err);
}

static void test_values(void)
{
    CHECK(parse("--nproc-per-node=0 j") != 0 && has("--nproc-per-node") && has("out of range"), "nproc 0: %s", err);
    CHECK(parse("--nproc-per-node=abc j") != 0 && has("'abc' is not a whole number") && has("'cpu', 'gpu' or 'auto'"),
          "nproc abc: %s", err);
    CHECK(parse("--nproc-per-node=cpu j") == 0 && !strcmp(o.nproc_spec, "cpu"), "nproc cpu");
    CHECK(parse("--nnodes=0 j") != 0 && has("--nnodes"), "nnodes 0: %s", err);
    CHECK(parse("--nnodes=4:2 j") != 0 && has("MIN is larger than MAX"), "nnodes 4:2: %s", err);
    CHECK(parse("--nnodes=a:2 j") != 0 && has("MIN:MAX"), "nnodes a:2: %s", err);
    CHECK(parse("--node-rank=-1 j") != 0 && has("--node-rank"), "node rank -1: %s", err);
    CHECK(parse("--max-restarts=-2 j") != 0 && has("--max-restarts"), "max restarts -2: %s", err);
    CHECK(parse("--master-port=70000 j") != 0 && has("--master-port") && has("out of range"), "port 70000: %s", err);
    CHECK(parse("--monitor-interval=x j") != 0 && has("not a number of seconds"), "interval x: %s", err);
    CHECK(parse("--role=a/b j") != 0 && has("--role") && has("'/'"), "role with a slash: %s", err);
    CHECK(parse("--rdzv-id=.. j") != 0 && has("--rdzv-id"), "rdzv id '..': %s", err);
    CHECK(parse("--rdzv-backend=etcd j") != 0 && has("'etcd' is not supported"), "etcd backend: %s", err);
    CHECK(parse("--rdzv-backend=static j") == 0 && !strcmp(o.rdzv_backend, "static"), "static backend");
    CHECK(parse("--log-dir ~ j") != 0 && has("--log-dir: empty"), "empty log dir: %s", err);
}

static void test_endpoint(void)
{
    char host[256], e[256];
    int port = 0;
    CHECK(launch_parse_endpoint("node1", host, sizeof host, &port, 29400, e, sizeof e) == 0 &&
              !strcmp(host, "node1") && port == 29400, "host alone: default port");
    CHECK(launch_parse_endpoint("10.0.0.1:1234", host, sizeof host, &port, 29400, e, sizeof e) == 0 &&
              !strcmp(host, "10.0.0.1") && port == 1234, "host:port");
    CHECK(launch_parse_endpoint("[::1]:5000", host, sizeof host, &port, 29400, e, sizeof e) == 0 &&
              !strcmp(host, "::1") && port == 5000, "[v6]:port");
    CHECK(launch_parse_endpoint("[fe80::1]", host, sizeof host, &port, 29400, e, sizeof e) == 0 &&
              !strcmp(host, "fe80::1") && port == 29400, "[v6] alone");
    CHECK(launch_parse_endpoint("::1", host, sizeof host, &port, 29400, e, sizeof e) != 0 &&
              strstr(e, "brackets"), "bare IPv6: %s", e);
    CHECK(launch_parse_endpoint("h:", host, sizeof host, &port, 29400, e, sizeof e) != 0 &&
              strstr(e, "no port"), "empty port: %s", e);
    CHECK(launch_parse_endpoint("h:0", host, sizeof host, &port, 29400, e, sizeof e) != 0, "port 0: %s", e);
    CHECK(launch_parse_endpoint("h:99999", host, sizeof host, &port, 29400, e, sizeof e) != 0 &&
              strstr(e, "out of range"), "port 99999: %s", e);
    CHECK(launch_parse_endpoint(":80", host, sizeof host, &port, 29400, e, sizeof e) != 0 &&
              strstr(e, "no host"), "no host: %s", e);
    CHECK(launch_parse_endpoint("[::1", host, sizeof host, &port, 29400, e, sizeof e) != 0, "unclosed [: %s", e);
    CHECK(launch_parse_endpoint("[h]:1", host, sizeof host, &port, 29400, e, sizeof e) != 0, "[name]: %s", e);
    CHECK(parse("--rdzv-endpoint=::1 j") != 0 && has("--rdzv-endpoint: ") && has("brackets"),
          "the option names itself: %s", err);
}

static void test_rdzv_conf(void)
{
    CHECK(parse("--rdzv-conf=join_timeout=5,last_call_timeout=1.5,heartbeat_timeout=2,is_host=false j") == 0 &&
              o.rdzv_conf.join_timeout == 5 && o.rdzv_conf.last_call_timeout == 1.5 &&
              o.rdzv_conf.heartbeat_timeout == 2 && o.rdzv_conf.is_host == 0,
          "rdzv-conf values");
    CHECK(parse("--rdzv_conf read_timeout=7,timeout=9 j") == 0 && o.rdzv_conf.read_timeout == 7 &&
              o.rdzv_conf.join_timeout == 9, "read_timeout; timeout means join_timeout");
    CHECK(parse("--rdzv-conf=join_timout=5 j") != 0 && has("did you mean 'join_timeout'?"), "conf typo: %s", err);
    CHECK(parse("--rdzv-conf=join_timeout=soon j") != 0 && has("join_timeout") && has("'soon'"), "conf value: %s", err);
    CHECK(parse("--rdzv-conf=is_host j") != 0 && has("KEY=VALUE"), "conf without '=': %s", err);
}

static void test_std(void)
{
    CHECK(parse("-r 3 j") == 0 && launch_std_for(&o.redirects, 0) == LAUNCH_STD_ALL &&
              launch_std_for(&o.redirects, 7) == LAUNCH_STD_ALL, "-r 3: every rank");
    CHECK(parse("-r3 -t1 j") == 0 && launch_std_for(&o.redirects, 2) == LAUNCH_STD_ALL &&
              launch_std_for(&o.tee, 2) == LAUNCH_STD_OUT, "-r3 -t1 attached");
    CHECK(parse("--tee 0:1,1:2 j") == 0 && launch_std_for(&o.tee, 0) == LAUNCH_STD_OUT &&
              launch_std_for(&o.tee, 1) == LAUNCH_STD_ERR && launch_std_for(&o.tee, 2) == LAUNCH_STD_NONE,
          "per-rank map, unlisted ranks none");
    CHECK(parse("--redirects=4 j") != 0 && has("--redirects") && has("0-3"), "redirects 4: %s", err);
    CHECK(parse("-t 0:1,0:2 j") != 0 && has("twice"), "rank twice: %s", err);
    CHECK(parse("-t 0:1, j") != 0, "trailing comma: %s", err);
    CHECK(parse("-t x:1 j") != 0 && has("local rank"), "bad rank: %s", err);
    CHECK(parse("--local-ranks-filter=0,2 j") == 0 && o.has_ranks_filter && o.ranks_filter[0] &&
              !o.ranks_filter[1] && o.ranks_filter[2], "--local-ranks-filter 0,2");
    CHECK(parse("--local_ranks_filter=0,,1 j") != 0, "bad filter: %s", err);
}

static void test_programs(void)
{
    CHECK(parse("--nproc-per-node=2 -- sh -c --nnodes=x") == 0 && o.program_argc == 3 &&
              !strcmp(o.program[0], "sh") && !strcmp(o.program[2], "--nnodes=x") && !o.program[3] && !o.job_path,
          "everything after -- is the program's");
    CHECK(parse("--nproc-per-node=2 --") != 0 && has("followed by a program"), "empty program: %s", err);
    CHECK(parse("job.yaml -- prog") != 0 && has("not both"), "job and program: %s", err);
    /* torchrun's words: python -u script, python -u -m module */
    CHECK(parse("--nproc-per-node=2 train.py --lr 3") == 0 && o.program_argc == 5 &&
              !strcmp(o.program[0], "python3") && !strcmp(o.program[1], "-u") && !strcmp(o.program[2], "train.py") &&
              !strcmp(o.program[3], "--lr") && !o.program[5] && !strcmp(o.python_target, "train.py"),
          "script.py runs with python3 -u and keeps its arguments");
    CHECK(parse("-m pkg.train --x") == 0 && o.program_argc == 5 && !strcmp(o.program[1], "-u") &&
              !strcmp(o.program[2], "-m") && !strcmp(o.program[3], "pkg.train") && !strcmp(o.python_target, "pkg.train"),
          "-m module");
    CHECK(parse("--no-python ./a.out 1") == 0 && o.program_argc == 2 && !strcmp(o.program[0], "./a.out"),
          "--no-python program");
    CHECK(parse("--no-python") != 0 && has("--no-python needs a program"), "--no-python alone: %s", err);
    /* --run-path: python3 -u -c BOOT script args (runpy.run_path); it wins over --no-python, as in torchrun */
    CHECK(parse("--run_path /abs/job.py a") == 0 && o.program_argc == 6 && !strcmp(o.program[1], "-u") &&
              !strcmp(o.program[2], "-c") && strstr(o.program[3], "runpy.run_path") && !strcmp(o.program[4], "/abs/job.py") &&
              !strcmp(o.program[5], "a") && o.python_prepended, "--run-path");
    CHECK(parse("--no-python --run-path job.py") == 0 && !strcmp(o.program[2], "-c"), "--run-path wins over --no-python");
    CHECK(parse("--run-path") != 0 && has("--run-path needs a script"), "--run-path alone: %s", err);
    CHECK(parse("-m --no-python pkg.x") != 0 && has("cannot go with --no-python"), "-m with --no-python: %s", err);
    CHECK(parse("--run-path -m pkg.x") != 0 && has("cannot go with --run-path"), "-m with --run-path: %s", err);
}

static void test_finish(void)
{
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    CHECK(parse_finish("--nproc-per-node=gpu j") != 0 && has("no GPU"), "gpu without GPUs: %s", err);
    CHECK(parse_finish("--nproc-per-node=auto j") == 0 && o.nproc == 1, "auto without GPUs: 1");
    setenv("CUDA_VISIBLE_DEVICES", "0,1,2", 1);
    CHECK(parse_finish("--nproc-per-node=gpu j") == 0 && o.nproc == 3, "gpu: CUDA_VISIBLE_DEVICES=0,1,2 -> %d", o.nproc);
    CHECK(parse_finish("j") == 0 && o.nproc == 3, "auto: the GPUs");
    unsetenv("CUDA_VISIBLE_DEVICES");
    CHECK(parse_finish("--nproc-per-node=cpu j") == 0 && o.nproc == launch_count_cpus() && o.nproc >= 1,
          "cpu: %d cores", o.nproc);
    CHECK(parse_finish("--nnodes=2 j") != 0 && has("--rdzv-endpoint"), "2 nodes need an endpoint: %s", err);
    CHECK(parse_finish("--standalone --nnodes=2 j") != 0 && has("--standalone"), "standalone 2 nodes: %s", err);
    CHECK(parse_finish("--standalone --rdzv-endpoint=h j") != 0 && has("--standalone"), "standalone + endpoint: %s", err);
    CHECK(parse_finish("--nnodes=2 --node-rank=2 --rdzv-endpoint=h j") != 0 && has("--node-rank=2"),
          "node rank out of range: %s", err);
    CHECK(parse_finish("--nnodes=2 --rdzv-backend=static --rdzv-endpoint=h j") != 0 && has("--node-rank"),
          "static needs a node rank: %s", err);
    CHECK(parse_finish("--nnodes=2 --rdzv-backend=static --node-rank=1 --master-addr=m --master-port=99 j") == 0 &&
              !strcmp(o.rdzv_host, "m") && o.rdzv_port == 99 && o.master_port == 0,
          "static meets at master addr:port");
    CHECK(parse_finish("--master-addr=m j") != 0 && has("--master-port"), "master addr alone: %s", err);
    CHECK(parse_finish("--nproc-per-node=2") != 0 && has("nothing to run"), "nothing to run: %s", err);
    CHECK(parse_finish("j") == 0 && o.rdzv_id[0] && o.nnodes_max == 1, "a default rdzv id: %s", o.rdzv_id);
    CHECK(parse_finish("--nnodes=2 --rdzv-endpoint=h j") == 0 && !strcmp(o.rdzv_id, "none"),
          "several nodes: rdzv id 'none' like torchrun");
}

static void test_merge_job(void)
{
    static job_spec job;
    memset(&job, 0, sizeof job);
    snprintf(job.path, sizeof job.path, "job.yaml");
    job.launch.max_restarts = 2;
    snprintf(job.launch.nproc_per_node, sizeof job.launch.nproc_per_node, "3");
    snprintf(job.launch.nnodes, sizeof job.launch.nnodes, "1");
    snprintf(job.launch.log_dir, sizeof job.launch.log_dir, "/tmp/x");
    snprintf(job.launch.rdzv_id, sizeof job.launch.rdzv_id, "fromfile");
    CHECK(parse("--nproc-per-node=5 job.yaml") == 0 && launch_opts_merge_job(&o, &job, err, sizeof err) == 0 &&
              !strcmp(o.nproc_spec, "5") && o.max_restarts == 2 && !strcmp(o.log_dir, "/tmp/x") &&
              !strcmp(o.rdzv_id, "fromfile"),
          "the command line wins; the file fills the rest");
    snprintf(job.launch.nnodes, sizeof job.launch.nnodes, "x");
    CHECK(parse("job.yaml") == 0 && launch_opts_merge_job(&o, &job, err, sizeof err) != 0 &&
              has("job.yaml: launch.nnodes: "), "a bad launch value names file and key: %s", err);
    CHECK(parse("--nnodes=1 job.yaml") == 0 && launch_opts_merge_job(&o, &job, err, sizeof err) == 0,
          "the command line hides the file's bad value");
}

int main(void)
{
    test_spellings();
    test_unknown();
    test_values();
    test_endpoint();
    test_rdzv_conf();
    test_std();
    test_programs();
    test_finish();
    test_merge_job();
    launch_opts_free(&o);
    CHECK_DONE();
}
