/* mfmactl: the command line of mfmad.  This file holds main(), the
 * options every command shares, the help texts and the error reporting;
 * the commands live in ctl_cmds.c, ctl_submit.c and ctl_bench.c. */
#include "ctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl_util.h"
#include "mfmad_build.h"

static const char help_main[] =
	"NAME\n"
	"    mfmactl - control and use mfmad, the GEMM inference daemon\n"
	"\n"
	"SYNOPSIS\n"
	"    mfmactl [-e ENDPOINT] [--json] [--timeout MS] [--spin-us US]\n"
	"            [--token-file FILE] [--tls-ca FILE] [--tls-cert FILE] [--tls-key FILE]\n"
	"            COMMAND [ARGS]\n"
	"    mfmactl COMMAND --help\n"
	"\n"
	"DESCRIPTION\n"
	"    Sends requests to a running mfmad over its Unix or TCP socket: GEMMs\n"
	"    (dense or 2:4 sparse, D = alpha*A.B + beta*C), resident weights,\n"
	"    status and benchmarks.  Matrices are read from and written to NumPy\n"
	"    .npy files.\n"
	"\n"
	"COMMANDS\n"
	"    ping      measure the round trip to the daemon\n"
	"    status    version, uptime, devices, weights and request counters\n"
	"    submit    run one GEMM on .npy files, print the timing, check it\n"
	"    load      make a weight (the A operand) resident on the devices\n"
	"    unload    drop a resident weight\n"
	"    weights   list the resident weights\n"
	"    drain     make the daemon stop taking work, finish it and exit\n"
	"    random    write a random matrix (optionally 2:4 sparse) to a .npy file\n"
	"    bench     closed-loop load: requests/s, latency percentiles, GFLOP/s\n"
	"    help      show the help of a command (mfmactl help submit)\n"
	"\n"
	"OPTIONS (before or after the command)\n"
	"    -e, --endpoint ENDPOINT\n"
	"        unix:PATH, tcp:HOST:PORT, tcp:[IPV6]:PORT, tls:HOST:PORT (TCP with\n"
	"        TLS; the daemon's certificate must name HOST) or a bare socket path.\n"
	"        A comma list (tcp:a:7470,tcp:b:7470) fails over: the first that\n"
	"        answers is used, a lost connection reconnects to the next.\n"
	"        Default: $MFMA_ENDPOINT, else $XDG_RUNTIME_DIR/mfmad.sock (not for\n"
	"        root) when a daemon listens there, else /run/mfmad/mfmad.sock (for\n"
	"        root and the mfmad group).\n"
	"    --json\n"
	"        Print the result as one JSON document on stdout (errors too, as\n"
	"        {\"error\": {...}}).  Human messages still go to stderr.\n"
	"    --timeout MS\n"
	"        Give up on the daemon after MS milliseconds per request (default:\n"
	"        wait forever).  A timeout exits with 3.\n"
	"    --spin-us US\n"
	"        Before a wait for the daemon sleeps, poll the socket without\n"
	"        sleeping for up to US microseconds (0 to 1000000; default:\n"
	"        $MFMA_SPIN_US, else 0).  Takes a thread's wake-up off each round\n"
	"        trip, at the price of a busy core while it waits: on a machine\n"
	"        with few cores it can take the core the daemon needs, and be\n"
	"        slower.  --timeout still ends a wait on time.\n"
	"    --token-file FILE\n"
	"        Send the token in FILE's first line first: a TCP listener with\n"
	"        listen.token_file asks for it (default: $MFMA_TOKEN_FILE).\n"
	"    --tls-ca FILE\n"
	"        tls: endpoints: the CAs (PEM) the daemon's certificate must chain to\n"
	"        (default: $MFMA_TLS_CA, else the system's CAs).\n"
	"    --tls-cert FILE, --tls-key FILE\n"
	"        tls: endpoints: this client's certificate and key (PEM), for a\n"
	"        daemon with listen.tls_client_ca (default: $MFMA_TLS_CERT,\n"
	"        $MFMA_TLS_KEY).\n"
	"    -h, --help\n"
	"        This text; after a command, that command's help.\n"
	"    -V, --version\n"
	"        Print the version of mfmactl and of the client library it runs\n"
	"        with, and exit (before the command only).\n"
	"\n"
	"ELEMENT TYPES AND .npy FILES\n"
	"    f32 (<f4), f16 (<f2), i8 (|i1), i32 (<i4).  NumPy has no bfloat16, so\n"
	"    bf16 matrices are stored as their 16-bit patterns in <u2 files: read\n"
	"    them with --dtype bf16; bf16 results are written as <u2.  Only C-order\n"
	"    arrays; a 1-D array of N elements is read as a 1 x N matrix.\n"
	"\n"
	"EXIT STATUS\n"
	"    0   success\n"
	"    1   the daemon answered with an error (unknown weight, bad shapes...)\n"
	"    2   usage error: a bad option or argument, an unreadable or invalid\n"
	"        input file\n"
	"    3   cannot connect, the connection broke, or a deadline passed\n"
	"        (DEADLINE_EXCEEDED: --timeout, or submit --deadline)\n"
	"    4   submit --check or bench --check: a result is over the tolerance\n"
	"    5   a local failure: out of memory, cannot write the output file or\n"
	"        standard output\n"
	"\n"
	"ENVIRONMENT\n"
	"    MFMA_ENDPOINT   the endpoint when -e is not given\n"
	"    MFMA_TOKEN_FILE the token file when --token-file is not given\n"
	"    MFMA_TLS_CA, MFMA_TLS_CERT, MFMA_TLS_KEY\n"
	"                    --tls-ca, --tls-cert, --tls-key when not given\n"
	"    MFMA_SPIN_US    --spin-us when not given\n"
	"\n"
	"EXAMPLES\n"
	"    mfmactl status\n"
	"    mfmactl random -o W.npy --shape 4096x4096 --dtype f16 --sparse24\n"
	"    mfmactl random -o X.npy --shape 4096x64 --dtype f16\n"
	"    mfmactl submit -a W.npy -b X.npy --sparse validate -o D.npy --check\n"
	"    mfmactl load w0 W.npy --sparse validate && mfmactl submit --weight w0 -b X.npy\n"
	"    mfmactl -e tcp:gpu1:7470 bench -n 2000 -j 16 --m 4096 --n 64 --k 4096 --sparse\n";

static const char help_ping[] =
	"SYNOPSIS\n"
	"    mfmactl ping [-c COUNT] [-s BYTES] [-i MS]\n"
	"\n"
	"    Sends COUNT pings (default 1) carrying BYTES of payload (default 0),\n"
	"    checks the payload comes back unchanged and prints each round trip,\n"
	"    then min/avg/max when COUNT > 1.\n"
	"\n"
	"OPTIONS\n"
	"    -c, --count COUNT     number of pings, 1 to 1000000\n"
	"    -s, --size BYTES      payload size, 0 to 67108864\n"
	"    -i, --interval MS     pause between pings (default 0)\n"
	"\n"
	"JSON\n"
	"    {\"endpoint\", \"count\", \"payload_bytes\", \"round_trip_ns\": [...],\n"
	"     \"min_ns\", \"avg_ns\", \"max_ns\"}\n"
	"\n"
	"EXAMPLE\n"
	"    mfmactl ping -c 10 -s 4096\n";

static const char help_status[] =
	"SYNOPSIS\n"
	"    mfmactl status\n"
	"\n"
	"    Prints the daemon's version and uptime; a table of devices (index,\n"
	"    backend, arch, name, weight memory used / device memory, queue depth,\n"
	"    requests in flight, completed/failed) followed by each device's kernel\n"
	"    variants and, for a GPU, its kernel providers (ours and the vendor\n"
	"    libraries), each marked (pinned) or (excluded) where cuda.providers /\n"
	"    hip.providers say so; the resident weights; the request counters.\n"
	"    --json prints all of it.\n"
	"\n"
	"JSON\n"
	"    {\"endpoint\", \"version\", \"uptime_ns\", \"weight_budget\", \"weight_bytes\",\n"
	"     \"devices\": [{\"index\", \"backend\", \"arch\", \"name\", \"mem_total\",\n"
	"     \"mem_used\", \"queue_depth\", \"in_flight\", \"completed\", \"failed\",\n"
	"     \"loop_starts\", \"fault\" (empty while it serves), \"worker_ns\": {\"idle\",\n"
	"     \"prepare\", \"launch\", \"wait\", \"answers\"}, \"variants\": [...],\n"
	"     \"providers\": [{\"name\", \"state\": \"available\" | \"pinned\" |\n"
	"     \"excluded\"}]}], \"weights\" and \"declared\": [see mfmactl weights],\n"
	"     \"counters\": {\"requests\", \"ok\", \"failed\", \"busy\", \"connections_open\",\n"
	"     \"connections_total\", \"in_flight\", \"malformed\"}}\n";

static const char help_submit[] =
	"SYNOPSIS\n"
	"    mfmactl submit (-a A.npy | --weight NAME [-a A.npy]) -b B.npy\n"
	"                   [-c C.npy --beta X]\n"
	"                   [--alpha X] [-o D.npy] [--sparse validate|prune|packed]\n"
	"                   [--dtype f32|f16|bf16|i8] [--out-dtype f32|f16|bf16|i32]\n"
	"                   [--device N] [--priority N] [--deadline US] [--check] [--shm]\n"
	"\n"
	"    Runs D = alpha * A.B + beta * C once.  A is M x K, B is K x N, C and D\n"
	"    are M x N.  Prints the device and kernel variant, the timing breakdown\n"
	"    (queue, copy in, kernel, copy out, server total, client round trip)\n"
	"    and the achieved GFLOP/s: dense-equivalent 2*M*N*K over the kernel\n"
	"    time and over the round trip.\n"
	"\n"
	"OPTIONS\n"
	"    -a, --a FILE          A as a dense matrix (dense unless --sparse)\n"
	"    -w, --weight NAME     A is the resident weight NAME (see mfmactl load);\n"
	"                          with --check, -a names the file it was loaded\n"
	"                          from: read for the reference only, never sent\n"
	"    -b, --b FILE          B\n"
	"    -c, --c FILE          C, in the output type (f32 data is rounded to a\n"
	"                          f16/bf16 output type)\n"
	"    --alpha X             default 1\n"
	"    --beta X              default 0 (1 when -c is given without --beta)\n"
	"    -o, --output FILE     write D there (bf16 as <u2)\n"
	"    --sparse MODE         how to send A as 2:4 sparse:\n"
	"                            validate  the daemon rejects A unless every group\n"
	"                                      of 4 along K has at most 2 non-zeros\n"
	"                            prune     the daemon keeps the 2 largest of every 4\n"
	"                            packed    compress here, send the canonical 2:4 form\n"
	"                                      (A must already be 2:4)\n"
	"    --dtype T             the type of A and B; f32 files are rounded to f16\n"
	"                          or bf16; needed to read <u2 files as bf16\n"
	"    --out-dtype T         type of D (default f32 for float inputs, i32 for i8)\n"
	"    --device N            run on device N (default: the daemon picks)\n"
	"    --priority N          0 default, 1 highest, larger is lower\n"
	"    --deadline US         the daemon fails the request (DEADLINE_EXCEEDED, exit\n"
	"                          3) if it has not finished US microseconds after\n"
	"                          arrival\n"
	"    --check               compare D with a float64 reference computed here (on\n"
	"                          the pruned A with --sparse prune or a 2:4 weight);\n"
	"                          print the relative Frobenius error; exit 4 when it\n"
	"                          is over the tolerance 2*u + (K+2)*2^-24, u the\n"
	"                          rounding of D's type (2^-24 f32, 2^-11 f16, 2^-8\n"
	"                          bf16): 2.4e-4 for f32 at K=4096, where one lost\n"
	"                          partial sum of 16 products is ~6e-2; i32 exact\n"
	"    --shm                 B and C through a shared-memory region (a sealed\n"
	"                          memfd, Unix socket only), D written into it by the\n"
	"                          daemon: no matrix bytes in the frames\n"
	"\n"
	"    The text output ends with the client's side: encode, send, wait and\n"
	"    decode, and the unexplained rest (the wait less the server total).\n"
	"\n"
	"JSON\n"
	"    {\"m\", \"n\", \"k\", \"dtype\", \"out_dtype\", \"device\": {\"index\", \"backend\",\n"
	"     \"arch\"}, \"variant\", \"timing\": {\"queue_ns\", \"h2d_ns\", \"kernel_ns\",\n"
	"     \"d2h_ns\", \"total_ns\", \"prep_ns\", \"round_trip_ns\", \"client_encode_ns\",\n"
	"     \"client_send_ns\", \"client_wait_ns\", \"client_decode_ns\",\n"
	"     \"unexplained_ns\"}, \"gflops_kernel\",\n"
	"     \"gflops_round_trip\", \"output\", \"check\": {\"rel_error\", \"tolerance\",\n"
	"     \"ok\"}}\n"
	"\n"
	"EXAMPLES\n"
	"    mfmactl submit -a A.npy -b B.npy -o D.npy --check\n"
	"    mfmactl submit -a A.npy -b B.npy --sparse prune --dtype f16 --check\n"
	"    mfmactl submit --weight w0 -b X.npy -c Y.npy --beta 1 -o Y2.npy\n"
	"    mfmactl submit --weight w0 -a W0.npy -b X.npy --check\n";

static const char help_load[] =
	"SYNOPSIS\n"
	"    mfmactl load NAME A.npy [--sparse validate|prune|packed] [--dtype T]\n"
	"                 [--device N] [--replace]\n"
	"\n"
	"    Makes A (M x K) resident under NAME, on every device or on device N.\n"
	"    GEMMs then name it (mfmactl submit --weight NAME) instead of sending\n"
	"    it.  With --sparse the weight is held in 2:4 form (see mfmactl submit\n"
	"    --help for the modes).\n"
	"\n"
	"OPTIONS\n"
	"    --sparse MODE         validate, prune or packed\n"
	"    --dtype T             f32, f16, bf16 or i8 (f32 files are rounded)\n"
	"    --device N            only device N (default: every device)\n"
	"    --replace             replace a weight of the same name\n"
	"\n"
	"JSON\n"
	"    the weight, as in mfmactl weights, and \"load_ns\": the load's round trip;\n"
	"    where the daemon stores weights (weights.persist), \"stored\": whether\n"
	"    this one's file was written, so that a restart restores it (false: a\n"
	"    full disk or an I/O error, said on standard error too)\n"
	"\n"
	"EXAMPLE\n"
	"    mfmactl load w0 W.npy --dtype f16 --sparse prune\n";

static const char help_unload[] =
	"SYNOPSIS\n"
	"    mfmactl unload NAME\n"
	"\n"
	"    Drops the resident weight NAME from every device.  An unknown name is\n"
	"    a daemon error (exit 1).\n"
	"\n"
	"JSON\n"
	"    {\"unloaded\": NAME}\n";

static const char help_drain[] =
	"SYNOPSIS\n"
	"    mfmactl drain\n"
	"\n"
	"    Asks the daemon to drain, as SIGUSR1 does: /readyz answers 503 at\n"
	"    once, the listeners close (new connections are refused), what is in\n"
	"    flight is finished and the daemon exits 0.  Open connections get\n"
	"    \"shutting down\" for new requests.\n"
	"\n"
	"JSON\n"
	"    {\"draining\": ENDPOINT}\n";

static const char help_weights[] =
	"SYNOPSIS\n"
	"    mfmactl weights\n"
	"\n"
	"    Lists the resident weights: name, shape, dtype, sparsity (dense or\n"
	"    2:4), bytes per device, devices, the GEMMs served on it (GEMMS) and\n"
	"    the mean count of requests a launch answered (MEAN BATCH); then the\n"
	"    weights the daemon's configuration declares, with their state.\n"
	"\n"
	"JSON\n"
	"    {\"weights\": [{\"name\", \"rows\", \"cols\", \"dtype\", \"sparse\", \"bytes\",\n"
	"     \"devices\": [...], \"requests\", \"launches\"}], \"declared\": [{\"name\",\n"
	"     \"file\", \"state\" (loading, resident or failed), \"message\"}]}\n"
	"    (declared: the daemon's weights.declare entries; requests over launches\n"
	"    is the MEAN BATCH column)\n";

static const char help_random[] =
	"SYNOPSIS\n"
	"    mfmactl random -o FILE.npy --shape RxC --dtype f32|f16|bf16|i8\n"
	"                   [--sparse24] [--seed N]\n"
	"\n"
	"    Writes a random R x C matrix that has no zeros: floats of magnitude\n"
	"    1/16 to 1 with random signs, i8 from -127 to 127.  With --sparse24\n"
	"    every group of 4 along a row keeps 2 random positions (any of the 6\n"
	"    pairs) and the other two are 0; C must then be a multiple of 4.  No\n"
	"    daemon is needed.\n"
	"\n"
	"OPTIONS\n"
	"    -o, --output FILE     the .npy file to write (bf16 as <u2)\n"
	"    --shape RxC           e.g. 128x256\n"
	"    --dtype T             f32, f16, bf16 or i8\n"
	"    --sparse24            a 2:4 sparse matrix\n"
	"    --seed N              the random seed (default: from the clock; printed)\n"
	"\n"
	"JSON\n"
	"    {\"output\", \"rows\", \"cols\", \"dtype\", \"sparse24\", \"seed\"}\n";

static const char help_bench[] =
	"SYNOPSIS\n"
	"    mfmactl bench [-n REQUESTS] [-j CONCURRENCY] [--connections C]\n"
	"                  [--m M --n N --k K] [--dtype T] [--out-dtype T]\n"
	"                  [--sparse[=packed|validate|prune]] [--weight NAME | --resident]\n"
	"                  [--warmup N] [--device N] [--seed N] [--samples] [--shm]\n"
	"                  [--check] [--cork] [--own-d]\n"
	"\n"
	"    A closed loop: CONCURRENCY requests are kept in flight at all times\n"
	"    until REQUESTS have completed, spread over C connections (default:\n"
	"    one per request in flight, at most 64), each pipelining its share.\n"
	"    Inputs are random, generated once.  Prints requests/s, latency\n"
	"    percentiles (client round trip), GFLOP/s (dense-equivalent 2*M*N*K:\n"
	"    over the wall time, and over the kernels' own time, each launch\n"
	"    once), the mean server timing, how many requests a launch answered\n"
	"    on average\n"
	"    (requests over launches: the daemon batches concurrent requests on\n"
	"    one weight), the share of the wall time the device\n"
	"    spent in kernels, and the slowest answer's server timing (where a\n"
	"    tail request's time went: queue, copies, kernel; its launch's size\n"
	"    and variant; \"slowest\" with --json).\n"
	"\n"
	"OPTIONS\n"
	"    -n, --requests N      measured requests (default 100)\n"
	"    -j, --concurrency J   requests in flight (default 1)\n"
	"    --connections C       connections, 1 to J (default J, at most 64: the\n"
	"                          daemon's default limits.max_connections_per_user)\n"
	"    --m M, --n N, --k K   the GEMM shape (default 256 each); --m and --k\n"
	"                          come from the weight with --weight\n"
	"    --dtype T             f32, f16, bf16 or i8 (default f16)\n"
	"    --out-dtype T         f32, f16, bf16 or i32 (default: the daemon's)\n"
	"    --sparse[=MODE]       A is 2:4 sparse: packed (the default: compressed\n"
	"                          here and sent in 2:4 form), validate or prune (sent\n"
	"                          dense for the daemon to check or prune)\n"
	"    --weight NAME         A is an already resident weight\n"
	"    --resident            load a random A as a weight first (2:4 with\n"
	"                          --sparse), unload it at the end\n"
	"    --warmup N            unmeasured requests per connection first (default 1)\n"
	"    --device N            pin every request to device N\n"
	"    --seed N              seed of the random inputs (default 1)\n"
	"    --samples             with --json: also every round trip, sorted, as\n"
	"                          \"latency_samples_ns\" (what the Python package's\n"
	"                          bench command draws)\n"
	"    --shm                 B and D through a shared-memory region per\n"
	"                          connection (one D per request in flight): no\n"
	"                          matrix bytes in the frames; Unix socket only;\n"
	"                          with --resident/--weight and batching too\n"
	"    --check               check every measured answer against a float64\n"
	"                          reference (the tolerance of submit --check), each\n"
	"                          connection with a B of its own, so that the\n"
	"                          daemon's batches join different columns; exit\n"
	"                          status 4 when one is wrong.  The reference costs\n"
	"                          M*N*K per connection first and the comparison\n"
	"                          M*N per answer: measure speed without it.  Not\n"
	"                          with --weight (A unknown here) or --sparse=prune\n"
	"    --cork                a connection with more than one request in flight\n"
	"                          takes every answer already there, then writes the\n"
	"                          requests that refill the freed slots in one call\n"
	"                          (the library's mfma_cork): fewer system calls;\n"
	"                          faster on small hosts, not on every load\n"
	"    --own-d               each request in flight with a D buffer of its own\n"
	"                          (mfma_gemm_args.d), which the library copies D\n"
	"                          into as the answer is read, as a client keeping\n"
	"                          its results would; without it, D is in a buffer\n"
	"                          the library lends with each result.  --shm\n"
	"                          implies it (D in the region)\n"
	"\n"
	"JSON\n"
	"    {\"requests\", \"errors\", \"concurrency\", \"connections\", \"m\", \"n\", \"k\",\n"
	"     \"dtype\", \"a\" (dense, 2:4 packed, 2:4 validate, prune, resident dense or\n"
	"     resident 2:4), \"spin_us\", \"wall_ns\", \"requests_per_s\",\n"
	"     \"latency_ns\": {\"min\", \"mean\", \"p50\", \"p90\", \"p99\", \"max\"}, \"gflops_wall\",\n"
	"     \"gflops_kernel\", \"server_mean_ns\": {\"queue\", \"h2d\", \"kernel\", \"d2h\",\n"
	"     \"total\"}, \"client_mean_ns\": {\"encode\", \"send\", \"wait\", \"decode\",\n"
	"     \"unexplained\"}, \"slowest\": {\"round_trip_ns\", \"queue_ns\", \"h2d_ns\",\n"
	"     \"kernel_ns\", \"d2h_ns\", \"total_ns\", \"client_wait_ns\", \"batch_requests\",\n"
	"     \"variant\"}, \"shm\", \"cork\", \"own_d\", \"mean_batch\",\n"
	"     \"device_busy\", \"variants\": {VARIANT: answers, ...},\n"
	"     \"latency_samples_ns\": [...] with --samples, \"check\": {\"answers\",\n"
	"     \"failed\", \"worst_rel_error\", \"tolerance\"} with --check}\n"
	"\n"
	"EXAMPLES\n"
	"    mfmactl bench -n 1000 -j 8 --m 1024 --n 1024 --k 1024 --dtype f16\n"
	"    mfmactl bench -n 500 -j 4 --resident --sparse --m 4096 --k 4096 --n 32\n"
	"    mfmactl bench -n 500 --resident --m 4096 --k 4096 --n 16 --shm\n"
	"    mfmactl bench -n 2000 -j 64 --resident --sparse --m 2048 --k 2048 --n 8 --check\n";

static const struct command {
	const char *name;
	int (*run)(struct ctl *, int, char **);
	const char *help;
} commands[] = {
	{ "ping", ctl_cmd_ping, help_ping },
	{ "status", ctl_cmd_status, help_status },
	{ "submit", ctl_cmd_submit, help_submit },
	{ "load", ctl_cmd_load, help_load },
	{ "unload", ctl_cmd_unload, help_unload },
	{ "weights", ctl_cmd_weights, help_weights },
	{ "drain", ctl_cmd_drain, help_drain },
	{ "random", ctl_cmd_random, help_random },
	{ "bench", ctl_cmd_bench, help_bench },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static const char help_common[] =
	"\n"
	"COMMON OPTIONS\n"
	"    -e, --endpoint ENDPOINT, --json, --timeout MS, --spin-us US, -h/--help\n"
	"    (see mfmactl --help, which also lists the exit codes)\n";

void ctl_print_help(const char *cmd)
{
	const struct command *c = cmd ? find_command(cmd) : NULL;
	if (!c) {
		fputs(help_main, stdout);
		return;
	}
	printf("mfmactl %s\n\n", c->name);
	fputs(c->help, stdout);
	fputs(help_common, stdout);
}

/* The run's ctl, for ctl_usage's {"error": ...} with --json (usage errors
 * are found in many places that have no ctl at hand). */
static struct ctl *run_ctl;

static void json_error(struct ctl *ctl, int code, const char *name, const char *message);

int ctl_usage(const char *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "mfmactl%s%s: %s\nTry 'mfmactl %s%s--help'.\n", cmd ? " " : "",
		cmd ? cmd : "", msg, cmd ? cmd : "", cmd ? " " : "");
	if (run_ctl)
		json_error(run_ctl, -CTL_EXIT_USAGE, "USAGE", msg);
	return CTL_EXIT_USAGE;
}

int ctl_common_option(struct ctl *ctl, const char *cmd, int opt, const char *arg)
{
	char err[256];
	switch (opt) {
	case 'h':
		ctl_print_help(cmd);
		return CTL_EXIT_OK;
	case 'e':
		ctl->endpoint = arg;
		return CTL_CONTINUE;
	case CTL_OPT_JSON:
		ctl->json = true;
		return CTL_CONTINUE;
	case CTL_OPT_TIMEOUT:
		if (ctl_parse_int("--timeout", arg, 0, 86400000, &ctl->timeout_ms, err,
				  sizeof(err)) < 0)
			return ctl_usage(cmd, "%s", err);
		return CTL_CONTINUE;
	case CTL_OPT_SPIN_US:
		if (ctl_parse_int("--spin-us", arg, 0, (int)MFMA_SPIN_US_MAX, &ctl->spin_us, err,
				  sizeof(err)) < 0)
			return ctl_usage(cmd, "%s", err);
		return CTL_CONTINUE;
	case CTL_OPT_TOKEN_FILE:
		ctl->token_file = arg;
		return CTL_CONTINUE;
	case CTL_OPT_TLS_CA:
		ctl->tls.ca_file = arg;
		return CTL_CONTINUE;
	case CTL_OPT_TLS_CERT:
		ctl->tls.cert_file = arg;
		return CTL_CONTINUE;
	case CTL_OPT_TLS_KEY:
		ctl->tls.key_file = arg;
		return CTL_CONTINUE;
	case '?':
		/* getopt has said what was wrong, on stderr only; a script that
		 * asked for --json reads stdout and must find an error there. */
		fprintf(stderr, "Try 'mfmactl %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
		json_error(ctl, -CTL_EXIT_USAGE, "USAGE",
			   "an unknown option, or an option without its argument (the message "
			   "is on standard error)");
		return CTL_EXIT_USAGE;
	default:
		return ctl_usage(cmd, "unexpected option");
	}
}

/* Erases the progress line of a send, where one is shown, so that an error
 * starts a line of its own. */
static void progress_clear(struct ctl *ctl)
{
	if (ctl->progress_pct >= 0)
		fputs("\r\033[K", stderr);
	ctl->progress_pct = -1;
}

static void json_error(struct ctl *ctl, int code, const char *name, const char *message)
{
	if (!ctl->json)
		return;
	json_object_begin(&ctl->j);
	json_key(&ctl->j, "error");
	json_object_begin(&ctl->j);
	json_kv_int(&ctl->j, "code", code);
	json_kv_string(&ctl->j, "name", name);
	json_kv_string(&ctl->j, "message", message);
	json_object_end(&ctl->j);
	json_object_end(&ctl->j);
}

int ctl_fail(struct ctl *ctl, const char *what, int rc, const struct mfma_error *err)
{
	/* The daemon's words, on a terminal: printable (ctl_printable). */
	char said[sizeof(err->message)];
	const char *msg = err && err->message[0] ? err->message : strerror(-rc);
	ctl_printable(msg, strnlen(msg, sizeof(said) - 1), said);
	msg = said;
	progress_clear(ctl);
	if (MFMA_IS_REMOTE(rc)) {
		int code = MFMA_REMOTE_CODE(rc);
		fprintf(stderr, "mfmactl: %s: %s: %s\n", what, mfma_code_name(code), msg);
		json_error(ctl, code, mfma_code_name(code), msg);
		/* A deadline is --timeout's, whether the daemon or the library
		 * (while sending, or waiting for a connection) found it passed. */
		return code == MFMA_CODE_DEADLINE_EXCEEDED ? CTL_EXIT_TRANSPORT : CTL_EXIT_DAEMON;
	}
	fprintf(stderr, "mfmactl: %s: %s\n", what, msg);
	/* The library refuses a request it will not send (an empty weight
	 * name: `mfmactl load "" W.npy`) with -EINVAL before any byte goes
	 * out: a bad argument (2), not a connection that failed (3); its
	 * transport failures have errnos of their own (-EPROTO, -ECONNRESET,
	 * -ETIMEDOUT...), and connect's -EINVAL is a usage error already. */
	if (rc == -EINVAL) {
		json_error(ctl, -CTL_EXIT_USAGE, "USAGE", msg);
		return CTL_EXIT_USAGE;
	}
	json_error(ctl, rc, rc == -ENOMEM ? "ENOMEM" : "TRANSPORT", msg);
	return rc == -ENOMEM ? CTL_EXIT_LOCAL : CTL_EXIT_TRANSPORT;
}

int ctl_fail_local(struct ctl *ctl, int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	progress_clear(ctl);
	fprintf(stderr, "mfmactl: %s\n", msg);
	json_error(ctl, -code, code == CTL_EXIT_USAGE ? "USAGE" : "LOCAL", msg);
	return code;
}

/* Frames below this go too fast for a progress line to help. */
#define CTL_PROGRESS_MIN (16u << 20)

static void progress_cb(void *user, uint64_t sent, uint64_t total)
{
	struct ctl *ctl = user;
	if (total < CTL_PROGRESS_MIN)
		return;
	if (sent >= total) {
		progress_clear(ctl);
		return;
	}
	int pct = (int)(sent * 100 / total);
	if (pct == ctl->progress_pct)
		return;
	char a[32], b[32];
	ctl_format_bytes(sent, a, sizeof(a));
	ctl_format_bytes(total, b, sizeof(b));
	fprintf(stderr, "\rsending %s of %s (%d%%)\033[K", a, b, pct);
	ctl->progress_pct = pct;
}

void ctl_progress(struct ctl *ctl, mfma_client *client)
{
	ctl->progress_pct = -1;
	if (!ctl->json && isatty(STDERR_FILENO))
		mfma_set_progress(client, progress_cb, ctl);
}

int ctl_connect(struct ctl *ctl, mfma_client **client)
{
	struct mfma_error err;
	/* --timeout bounds the connection too (a TLS port that never
	 * answers held it 30 s whatever --timeout said). */
	int rc = mfma_connect_timeout(ctl->endpoint, &ctl->tls, ctl->timeout_ms, client, &err);
	if (rc < 0)
		return rc == -EINVAL ? ctl_fail_local(ctl, CTL_EXIT_USAGE, "%s", err.message)
				     : ctl_fail(ctl, "connect", rc, &err);
	mfma_set_timeout(*client, ctl->timeout_ms);
	if (ctl->spin_us >= 0)
		(void)mfma_set_spin_us(*client, (uint32_t)ctl->spin_us); /* in range: parsed so */
	const char *tf = ctl->token_file ? ctl->token_file : getenv("MFMA_TOKEN_FILE");
	if (!tf || !*tf)
		return CTL_EXIT_OK;
	char token[4096];
	FILE *f = fopen(tf, "r");
	if (!f || !fgets(token, sizeof(token), f)) {
		/* Empty only when nothing failed: fopen takes a directory,
		 * whose read fails (EISDIR). */
		int e = errno;
		bool empty = f && !ferror(f);
		if (f)
			fclose(f);
		mfma_close(*client);
		*client = NULL;
		return ctl_fail_local(ctl, CTL_EXIT_USAGE, "cannot read the token from %s: %s", tf,
				      empty ? "empty file" : strerror(e));
	}
	fclose(f);
	token[strcspn(token, "\r\n")] = '\0';
	rc = mfma_authenticate(*client, token, strlen(token), &err);
	explicit_bzero(token, sizeof(token));
	if (rc < 0) {
		mfma_close(*client);
		*client = NULL;
		return ctl_fail(ctl, "authenticate", rc, &err);
	}
	return CTL_EXIT_OK;
}

/* ---- standard output on a terminal ---- */

/* A byte 0xC2 that ended one write, held for the next: it may begin a C1
 * control (ctl_printable). */
static char tty_held;

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static ssize_t tty_write(void *cookie, const char *buf, size_t n)
{
	(void)cookie;
	char in[4097], out[4097];
	size_t done = 0;
	while (done < n) {
		size_t h = tty_held != 0;
		if (h)
			in[0] = tty_held;
		size_t k = n - done < sizeof(in) - 1 - h ? n - done : sizeof(in) - 1 - h;
		memcpy(in + h, buf + done, k);
		size_t len = h + k;
		tty_held = 0;
		if ((unsigned char)in[len - 1] == 0xc2)
			tty_held = in[--len];
		ctl_printable(in, len, out);
		if (write_all(STDOUT_FILENO, out, len) < 0)
			return done ? (ssize_t)done : -1;
		done += k;
	}
	return (ssize_t)n;
}

static int tty_close(void *cookie)
{
	(void)cookie;
	if (tty_held)
		(void)!write(STDOUT_FILENO, "?", 1);
	return 0;
}

/* On a terminal, what the commands print goes through ctl_printable:
 * names, versions and messages the daemon sent are printed by many of
 * them, and none may drive the terminal.  Output to a file or a pipe
 * (an .npy on standard output) is left as it is. */
static void guard_terminal(void)
{
	if (!isatty(STDOUT_FILENO))
		return;
	cookie_io_functions_t io = { .write = tty_write, .close = tty_close };
	FILE *f = fopencookie(NULL, "w", io);
	if (!f)
		return;
	setvbuf(f, NULL, _IOLBF, 0);
	stdout = f;
}

/* The exit code rc, or 5 when what was printed could not all be written
 * (a full disk, /dev/full): a result that is not there is no success. */
static int flush_stdout(int rc)
{
	errno = 0;
	if (fflush(stdout) == 0 && !ferror(stdout))
		return rc;
	fprintf(stderr, "mfmactl: writing standard output: %s\n",
		errno ? strerror(errno) : "write error");
	return rc == CTL_EXIT_OK ? CTL_EXIT_LOCAL : rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { CTL_COMMON_LONG,
					      { "version", no_argument, NULL, 'V' },
					      { NULL, 0, NULL, 0 } };
	struct ctl ctl = { .timeout_ms = -1, .spin_us = -1, .progress_pct = -1 };
	int opt;
	run_ctl = &ctl;
	guard_terminal();
	/* Before the first option: --json can be read, and a usage error
	 * reported as JSON (ctl_usage), before the command is known. */
	json_init(&ctl.j, stdout, 2);

	/* '+': stop at the command word; its options are its own. */
	while ((opt = getopt_long(argc, argv, "+" CTL_COMMON_SHORT "V", opts, NULL)) != -1) {
		if (opt == 'V') {
			printf("mfmactl %s\nlibmfmaclient %s\n", MFMAD_VERSION, mfma_version());
			return flush_stdout(CTL_EXIT_OK);
		}
		int r = ctl_common_option(&ctl, NULL, opt, optarg);
		if (r != CTL_CONTINUE)
			return flush_stdout(r);
	}
	if (optind >= argc)
		return ctl_usage(NULL, "no command given");
	const char *name = argv[optind];
	if (!strcmp(name, "help")) {
		const char *topic = optind + 1 < argc ? argv[optind + 1] : NULL;
		/* `mfmactl help --help` asks for the help, not of a command. */
		if (topic && (!strcmp(topic, "--help") || !strcmp(topic, "-h")))
			topic = NULL;
		if (topic && !find_command(topic))
			return ctl_usage(NULL, "unknown command '%s'", topic);
		ctl_print_help(topic);
		return flush_stdout(CTL_EXIT_OK);
	}
	const struct command *cmd = find_command(name);
	if (!cmd)
		return ctl_usage(NULL, "unknown command '%s'", name);

	/* getopt prefixes its messages with argv[0]. */
	char prog[64];
	snprintf(prog, sizeof(prog), "mfmactl %s", cmd->name);
	int first = optind;
	argv[first] = prog;
	optind = 0; /* glibc: start a fresh scan of the command's arguments */
	return flush_stdout(cmd->run(&ctl, argc - first, argv + first));
}
