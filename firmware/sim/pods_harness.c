/*
 * pods_harness: the pod MCU's AVR image running under simavr, its encoder pins driven
 * from a known trajectory, its UART bridged to a pseudo-terminal.
 *
 *   pods_harness --elf FW.elf --trajectory FILE (--pty | --fd N) [options]
 *
 * Trajectory: text rows "t_us c0 [c1 [c2]]" (spaces or commas; '#' comments):
 * trajectory time in us (strictly increasing, from any start) and the cumulative
 * count of each pod (1 to 3) at that time. Between two rows a pod moving n counts
 * makes n quadrature edges, edge j (1..n) at T0 + floor((2j - 1)(T1 - T0) / 2n)
 * cycles: evenly spaced, none on a row's time. The pin levels at a count c are
 * the quadrature state of c (states 0 -> 1 -> 3 -> 2 as B<<1|A for +1 steps).
 * Pins: pod k on PC(2k) = A, PC(2k+1) = B (Arduino A0..A5).
 *
 * Time: the trajectory's first row is at the cycle the firmware starts Timer 1
 * (its t_us = 0; the harness watches TCCR1B); before that the pins rest at the
 * first row's state. Simulated time is paced to the wall clock times --speed
 * (0: as fast as possible). When the simulation cannot keep up, or the pty is
 * full because the host does not read, simulated time waits: it runs slower than
 * the wall clock, never skips, and no byte is lost.
 *
 * Double edges (--double POD:T, repeatable, T in trajectory time): pod POD's first
 * edge at or after T moves both of its lines at once (two counts in one cycle, as an
 * encoder seen too late does), when its segment has a second edge to take.
 *
 * Resets (stdin "reset\n", or --reset-at-us T in trajectory time): the MCU is
 * held in reset for --boot-us (the bootloader's wait on an Arduino), then
 * restarts its image; a reset during the hold starts the hold over. A reset takes effect at the first cycle R at or after the
 * request with R + boot a multiple of --align-us: the image then starts its clock
 * (as long after its restart as after power-on) on the first boot's grid, so every
 * restart's latch instants fall on the first boot's.
 *
 * stdout, one line per event (flushed):
 *   pty PATH                                   (--pty: the slave to open)
 *   base K cycle C counts B0[,B1,B2]           boot K read its initial encoder state
 *                                              (PINC): the pins showed counts B
 *   epoch K cycle C traj_us T                  boot K started Timer 1 (its t_us = 0)
 *   reset K cycle C traj_us T                  reset K applied (hold starts)
 *   double P cycle C traj_us T                 pod P moved both lines at once
 *   end traj_us T bytes N                      trajectory over (without --loop, after
 *                                              --tail-us more): the MCU stops, the
 *                                              pty stays until "quit"
 *   ran sim_us S wall_us W                     on exit: S simulated us run in W wall
 *                                              us (less than speed x W: held back)
 * stdin: "reset", "quit" (or end of file). Bytes the host writes to the pty are read
 * and dropped (the image does not listen).
 * Exit status: 0 ok, 2 bad usage or input, 3 the simulated MCU crashed or stopped.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "avr_ioport.h"
#include "avr_uart.h"
#include "sim_avr.h"
#include "sim_elf.h"
#include "sim_io.h"
#include "sim_irq.h"

#define MAX_PODS 3
#define MAX_RESETS 64
#define PACE_US 1000 /* simulated us between wall-clock checks and UART flushes */
#define BEHIND_NS 50000000LL /* re-anchor the pacing when this far behind (50 ms) */

/* ATmega328P data-space addresses (datasheet register summary) */
#define ADDR_PINC 0x26
#define ADDR_DDRC 0x27
#define ADDR_PORTC 0x28
#define ADDR_TCCR1B 0x81

static const uint8_t quad_state[4] = {0, 1, 3, 2}; /* count mod 4 -> B<<1|A */

typedef struct {
    int64_t *t_us;
    int64_t *counts; /* rows x n_pods */
    int rows, n_pods;
} trajectory_t;

typedef struct pod_s {
    int index;
    int64_t count;  /* cumulative count the pins show */
    int64_t target; /* count at the end of the current segment */
    int64_t seg_start_cycle, seg_len_cycles, seg_edges, seg_done;
    int row;        /* segment = rows row .. row+1 */
    int64_t rep;    /* loop repetition */
    int active;
    avr_irq_t *pin_a, *pin_b;
} pod_t;

static struct {
    avr_t *avr;
    trajectory_t traj;
    pod_t pods[MAX_PODS];
    int loop;
    double speed;
    double phase_deg; /* between an A edge and the next B edge (90: ideal) */
    int64_t cycles_per_us;
    int64_t boot_us, align_us, tail_us;
    int64_t origin; /* cycle of traj time (first row), -1 until the first start */
    int64_t span_us, span_counts[MAX_PODS];
    int epoch;
    int awaiting_base; /* the next PINC read is the firmware's initial state */
    int started;       /* Timer 1 running in this boot */
    int64_t hold_until; /* cycle the reset hold ends, or -1 */
    int resets_done;
    int64_t reset_at_us[MAX_RESETS];
    int n_reset_at;
    int64_t double_us[MAX_RESETS]; /* --double: trajectory time, pod, done */
    int double_pod[MAX_RESETS], double_done[MAX_RESETS], n_double;
    int reset_requested;
    int64_t reset_due_cycle; /* -1: none scheduled */
    uint8_t *out;
    size_t out_len, out_cap;
    uint64_t bytes_total;
    int fd;
    int quit;
} H = {.origin = -1, .hold_until = -1, .reset_due_cycle = -1};

static volatile sig_atomic_t got_signal;

static void die(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pods_harness: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(status);
}

static void event(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* -- trajectory ------------------------------------------------------------------- */

static void load_trajectory(const char *path, trajectory_t *t)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die(2, "%s: %s", path, strerror(errno));
    char line[512];
    int cap = 1024, lineno = 0;
    t->t_us = malloc(sizeof(int64_t) * cap);
    t->counts = malloc(sizeof(int64_t) * cap * MAX_PODS);
    t->rows = 0;
    t->n_pods = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        for (char *c = line; *c; c++)
            if (*c == ',')
                *c = ' ';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#' || *p == '\n' || *p == '\r' || *p == 0)
            continue;
        long long v[1 + MAX_PODS + 1];
        int n = 0;
        char *end;
        while (n < 1 + MAX_PODS + 1) {
            errno = 0;
            long long x = strtoll(p, &end, 10);
            if (end == p)
                break;
            if (errno)
                die(2, "%s:%d: value out of range", path, lineno);
            v[n++] = x;
            p = end;
        }
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            p++;
        if (*p || n < 2 || n > 1 + MAX_PODS)
            die(2, "%s:%d: expected 't_us c0 [c1 [c2]]' (integers, 1 to %d pods)", path,
                lineno, MAX_PODS);
        if (t->n_pods == 0)
            t->n_pods = n - 1;
        else if (n - 1 != t->n_pods)
            die(2, "%s:%d: %d counts, earlier rows have %d", path, lineno, n - 1, t->n_pods);
        if (t->rows && v[0] <= t->t_us[t->rows - 1])
            die(2, "%s:%d: t_us %lld does not increase", path, lineno, v[0]);
        if (t->rows == cap) {
            cap *= 2;
            t->t_us = realloc(t->t_us, sizeof(int64_t) * cap);
            t->counts = realloc(t->counts, sizeof(int64_t) * cap * MAX_PODS);
        }
        t->t_us[t->rows] = v[0];
        for (int k = 0; k < t->n_pods; k++)
            t->counts[t->rows * t->n_pods + k] = v[1 + k];
        t->rows++;
    }
    fclose(f);
    if (t->rows < 2)
        die(2, "%s: a trajectory needs at least two rows", path);
}

static int64_t row_count(int row, int k) { return H.traj.counts[row * H.traj.n_pods + k]; }

static int64_t traj_to_cycle(int64_t t_us, int64_t rep)
{
    return H.origin + (t_us - H.traj.t_us[0] + rep * H.span_us) * H.cycles_per_us;
}

static int64_t traj_us_of(int64_t cycle)
{
    return (cycle - H.origin) / H.cycles_per_us;
}

static void set_pins(pod_t *p)
{
    uint8_t s = quad_state[((p->count % 4) + 4) % 4];
    avr_raise_irq(p->pin_a, s & 1);
    avr_raise_irq(p->pin_b, (s >> 1) & 1);
}

/* Force the pin registers to the levels the encoders drive (after a reset or a
 * PORTC/DDRC write, where simavr applies the internal pull-up level instead). */
static void reassert_pins(void)
{
    for (int k = 0; k < H.traj.n_pods; k++) {
        pod_t *p = &H.pods[k];
        uint8_t s = quad_state[((p->count % 4) + 4) % 4];
        avr_raise_irq(p->pin_a, !(s & 1));
        avr_raise_irq(p->pin_a, s & 1);
        avr_raise_irq(p->pin_b, !((s >> 1) & 1));
        avr_raise_irq(p->pin_b, (s >> 1) & 1);
    }
}

/* Start the segment p->row .. p->row + 1 of repetition p->rep; 0 if the
 * trajectory is over. */
static int begin_segment(pod_t *p)
{
    if (p->row >= H.traj.rows - 1) {
        if (!H.loop)
            return 0;
        p->row = 0;
        p->rep++;
    }
    int k = p->index;
    int64_t t0 = traj_to_cycle(H.traj.t_us[p->row], p->rep);
    int64_t t1 = traj_to_cycle(H.traj.t_us[p->row + 1], p->rep);
    int64_t c0 = row_count(p->row, k) + p->rep * H.span_counts[k];
    int64_t c1 = row_count(p->row + 1, k) + p->rep * H.span_counts[k];
    p->seg_start_cycle = t0;
    p->seg_len_cycles = t1 - t0;
    p->seg_edges = c1 > c0 ? c1 - c0 : c0 - c1;
    p->seg_done = 0;
    p->target = c1;
    (void)c0;
    return 1;
}

static int64_t next_edge_cycle(pod_t *p)
{
    for (;;) {
        if (p->seg_done < p->seg_edges) {
            int64_t j = p->seg_done + 1;
            int64_t at =
                p->seg_start_cycle + ((2 * j - 1) * p->seg_len_cycles) / (2 * p->seg_edges);
            /* the line this edge moves: A from an even count up (or to an even count
             * down), else B; B edges move by the phase error */
            int64_t from = p->target > p->count ? p->count : p->count - 1;
            if ((from & 1) && H.phase_deg != 90.0)
                at += (int64_t)((H.phase_deg / 90.0 - 1.0) * (double)p->seg_len_cycles /
                                (double)p->seg_edges);
            return at;
        }
        p->row++;
        if (!begin_segment(p))
            return 0;
    }
}

static avr_cycle_count_t edge_timer(avr_t *avr, avr_cycle_count_t when, void *param)
{
    (void)avr;
    pod_t *p = param;
    int step = p->target > p->count ? 1 : -1;
    p->count += step;
    p->seg_done++;
    for (int i = 0; i < H.n_double && p->seg_done < p->seg_edges; i++) {
        if (H.double_done[i] || H.double_pod[i] != p->index || H.origin < 0 ||
            traj_us_of((int64_t)when) < H.double_us[i])
            continue;
        H.double_done[i] = 1;
        p->count += step; /* the next edge too: both lines change in this cycle */
        p->seg_done++;
        event("double %d cycle %lld traj_us %lld", p->index, (long long)when,
              (long long)traj_us_of((int64_t)when));
        break;
    }
    set_pins(p);
    int64_t next = next_edge_cycle(p);
    if (!next) {
        p->active = 0;
        return 0;
    }
    /* simavr drops a timer that does not move forward: two edges of one pod on one
     * cycle (above 8 M edges/s) go one cycle apart */
    return (avr_cycle_count_t)(next > (int64_t)when ? next : (int64_t)when + 1);
}

static void schedule_edges(void)
{
    for (int k = 0; k < H.traj.n_pods; k++) {
        pod_t *p = &H.pods[k];
        if (!p->active)
            continue;
        int64_t next = next_edge_cycle(p);
        if (!next) {
            p->active = 0;
            continue;
        }
        int64_t delay = next - (int64_t)H.avr->cycle;
        avr_cycle_timer_register(H.avr, (avr_cycle_count_t)(delay > 0 ? delay : 0), edge_timer,
                                 p);
    }
}

static int trajectory_over(int64_t cycle)
{
    return !H.loop && H.origin >= 0 && traj_us_of(cycle) >= H.span_us + H.tail_us;
}

/* -- simulated MCU hooks ------------------------------------------------------------ */

static void uart_out(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)param;
    if (H.out_len == H.out_cap) {
        H.out_cap = H.out_cap ? 2 * H.out_cap : 4096;
        H.out = realloc(H.out, H.out_cap);
    }
    H.out[H.out_len++] = (uint8_t)value;
}

static void pinc_read(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)value;
    (void)param;
    if (!H.awaiting_base || H.hold_until >= 0)
        return;
    H.awaiting_base = 0;
    char buf[96];
    int n = 0;
    for (int k = 0; k < H.traj.n_pods; k++)
        n += snprintf(buf + n, sizeof buf - n, "%s%lld", k ? "," : "",
                      (long long)H.pods[k].count);
    event("base %d cycle %llu counts %s", H.epoch, (unsigned long long)H.avr->cycle, buf);
}

static void portc_access(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)value;
    (void)param;
    reassert_pins();
}

static void tccr1b_access(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)param;
    if (H.started || H.hold_until >= 0 || (value & 7u) == 0)
        return;
    H.started = 1;
    int64_t cycle = (int64_t)H.avr->cycle;
    if (H.origin < 0) {
        H.origin = cycle;
        for (int k = 0; k < H.traj.n_pods; k++) {
            H.pods[k].active = 1;
            begin_segment(&H.pods[k]);
        }
        schedule_edges();
    }
    event("epoch %d cycle %lld traj_us %lld", H.epoch, (long long)cycle,
          (long long)traj_us_of(cycle));
    H.epoch++;
}

static void on_boot(void)
{
    H.started = 0;
    H.awaiting_base = 1;
    uint32_t flags = 0;
    avr_ioctl(H.avr, AVR_IOCTL_UART_GET_FLAGS('0'), &flags);
    flags &= ~(uint32_t)(AVR_UART_FLAG_STDIO | AVR_UART_FLAG_POLL_SLEEP);
    avr_ioctl(H.avr, AVR_IOCTL_UART_SET_FLAGS('0'), &flags);
}

/* simavr's errors go to stderr (stdout carries the events); its warnings and traces
 * are dropped (it warns about OCR1A written before Timer 1's clock is started) */
static void log_to_stderr(avr_t *avr, const int level, const char *format, va_list ap)
{
    (void)avr;
    if (level == LOG_ERROR) {
        fprintf(stderr, "simavr: ");
        vfprintf(stderr, format, ap);
    }
}

static void no_sleep(avr_t *avr, avr_cycle_count_t how_long)
{
    (void)avr;
    (void)how_long; /* pacing is done by the main loop */
}

/* -- resets ------------------------------------------------------------------------- */

/* Ends a sleep of the simulated CPU at the reset's cycle (the main loop applies it). */
static avr_cycle_count_t reset_timer(avr_t *avr, avr_cycle_count_t when, void *param)
{
    (void)avr;
    (void)when;
    (void)param;
    return 0;
}

static void schedule_reset_timer(void)
{
    if (H.reset_due_cycle < 0)
        return;
    int64_t delay = H.reset_due_cycle - (int64_t)H.avr->cycle;
    avr_cycle_timer_register(H.avr, (avr_cycle_count_t)(delay > 0 ? delay : 0), reset_timer,
                             NULL);
}

static void request_reset(int64_t at_traj_us)
{
    /* The image needs `origin` cycles from reset to its clock start (it took that at
     * power-on, from cycle 0): restart it at cycle R + hold with (R + hold) a multiple
     * of the grid, and its clock starts on the first boot's grid. */
    int64_t grid = H.align_us * H.cycles_per_us;
    int64_t hold = H.boot_us * H.cycles_per_us;
    int64_t want = H.origin + at_traj_us * H.cycles_per_us;
    if (want < (int64_t)H.avr->cycle) /* asked for a time already past: from now */
        want = (int64_t)H.avr->cycle;
    H.reset_due_cycle = want + (((-(want + hold)) % grid) + grid) % grid;
    schedule_reset_timer();
}

static void apply_reset(void)
{
    avr_t *avr = H.avr;
    int64_t cycle = H.reset_due_cycle; /* the instruction in progress may end a few later */
    event("reset %d cycle %lld traj_us %lld", H.resets_done, (long long)cycle,
          (long long)traj_us_of(cycle));
    H.resets_done++;
    H.reset_due_cycle = -1;
    avr_reset(avr); /* clears the cycle timers: the edges are scheduled again */
    schedule_edges();
    reassert_pins();
    H.hold_until = cycle + H.boot_us * H.cycles_per_us;
    if (H.hold_until < (int64_t)avr->cycle)
        H.hold_until = (int64_t)avr->cycle;
    H.started = 1; /* nothing runs until the hold ends */
}

static void end_hold(void)
{
    H.hold_until = -1;
    avr_reset(H.avr);
    schedule_edges();
    reassert_pins();
    on_boot();
    schedule_reset_timer();
}

/* -- output and pacing -------------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void read_commands(int timeout_ms)
{
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    if (H.quit || poll(&pfd, 1, timeout_ms) <= 0)
        return;
    static char buf[256];
    static size_t have;
    ssize_t n = read(0, buf + have, sizeof buf - 1 - have);
    if (n <= 0) {
        H.quit = 1; /* end of file: the parent went away */
        return;
    }
    have += (size_t)n;
    buf[have] = 0;
    char *line;
    while ((line = strchr(buf, '\n')) != NULL) {
        *line = 0;
        if (strcmp(buf, "reset") == 0 && H.origin >= 0 && H.reset_due_cycle < 0)
            request_reset(traj_us_of((int64_t)H.avr->cycle));
        else if (strcmp(buf, "quit") == 0)
            H.quit = 1;
        size_t used = (size_t)(line - buf) + 1;
        memmove(buf, line + 1, have - used + 1);
        have -= used;
    }
    if (have == sizeof buf - 1)
        have = 0; /* a line that long is not a command */
}

/* Write everything the UART produced; waits (serving stdin) while the pty is full. */
static void flush_output(void)
{
    size_t done = 0;
    while (done < H.out_len && !H.quit && !got_signal) {
        ssize_t n = write(H.fd, H.out + done, H.out_len - done);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            die(2, "writing the pty: %s", strerror(errno));
        struct pollfd pfd[2] = {{.fd = H.fd, .events = POLLOUT}, {.fd = 0, .events = POLLIN}};
        if (poll(pfd, 2, 100) > 0 && (pfd[1].revents & (POLLIN | POLLHUP)))
            read_commands(0);
    }
    H.bytes_total += done;
    H.out_len = 0;
    char sink[256];
    while (read(H.fd, sink, sizeof sink) > 0) /* the host's bytes: nobody listens */
        ;
}

static void on_signal(int sig)
{
    (void)sig;
    got_signal = 1;
}

static int open_own_pty(void)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) || unlockpt(master))
        die(2, "cannot create a pty: %s", strerror(errno));
    const char *name = ptsname(master);
    int slave = open(name, O_RDWR | O_NOCTTY); /* kept open: writes never hit EIO */
    struct termios tio;
    if (slave < 0 || tcgetattr(slave, &tio))
        die(2, "cannot open %s: %s", name, strerror(errno));
    cfmakeraw(&tio);
    tcsetattr(slave, TCSANOW, &tio);
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    event("pty %s", name);
    return master;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pods_harness --elf FILE --trajectory FILE (--pty | --fd N)\n"
            "       [--speed X] [--loop] [--boot-us US] [--align-us US] [--tail-us US]\n"
            "       [--reset-at-us US]... [--double POD:US]... [--phase-deg DEG]\n"
            "       [--mcu NAME] [--freq HZ]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *elf = NULL, *traj = NULL, *mcu = "atmega328p";
    long long freq = 16000000;
    int own_pty = 0;
    H.fd = -1;
    H.speed = 1.0;
    H.phase_deg = 90.0;
    H.boot_us = 0;
    H.align_us = 5000;
    H.tail_us = 20000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--pty")) {
            own_pty = 1;
            continue;
        }
        if (!strcmp(a, "--loop")) {
            H.loop = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--elf"))
            elf = v;
        else if (!strcmp(a, "--trajectory"))
            traj = v;
        else if (!strcmp(a, "--fd"))
            H.fd = atoi(v);
        else if (!strcmp(a, "--speed"))
            H.speed = atof(v);
        else if (!strcmp(a, "--boot-us"))
            H.boot_us = atoll(v);
        else if (!strcmp(a, "--phase-deg"))
            H.phase_deg = atof(v);
        else if (!strcmp(a, "--tail-us"))
            H.tail_us = atoll(v);
        else if (!strcmp(a, "--align-us"))
            H.align_us = atoll(v);
        else if (!strcmp(a, "--reset-at-us") && H.n_reset_at < MAX_RESETS)
            H.reset_at_us[H.n_reset_at++] = atoll(v);
        else if (!strcmp(a, "--double") && H.n_double < MAX_RESETS &&
                 sscanf(v, "%d:%lld", &H.double_pod[H.n_double],
                        (long long *)&H.double_us[H.n_double]) == 2)
            H.n_double++;
        else if (!strcmp(a, "--mcu"))
            mcu = v;
        else if (!strcmp(a, "--freq"))
            freq = atoll(v);
        else
            usage();
    }
    if (!elf || !traj || (own_pty == (H.fd >= 0)) || H.speed < 0 || H.boot_us < 0 ||
        H.align_us <= 0 || H.tail_us < 0 || !(H.phase_deg > 45.0 && H.phase_deg < 135.0) || freq < 1000000 || freq % 1000000)
        usage();
    for (int i = 1; i < H.n_reset_at; i++)
        if (H.reset_at_us[i] <= H.reset_at_us[i - 1])
            die(2, "--reset-at-us times must increase");
    load_trajectory(traj, &H.traj);
    for (int i = 0; i < H.n_double; i++)
        if (H.double_pod[i] < 0 || H.double_pod[i] >= H.traj.n_pods)
            die(2, "--double %d:%lld: no such pod", H.double_pod[i], (long long)H.double_us[i]);
    H.span_us = H.traj.t_us[H.traj.rows - 1] - H.traj.t_us[0];
    for (int k = 0; k < H.traj.n_pods; k++)
        H.span_counts[k] = row_count(H.traj.rows - 1, k) - row_count(0, k);

    avr_global_logger_set(log_to_stderr);
    elf_firmware_t fw;
    memset(&fw, 0, sizeof fw);
    if (elf_read_firmware(elf, &fw))
        die(2, "%s: not an AVR ELF image", elf);
    H.avr = avr_make_mcu_by_name(mcu);
    if (!H.avr)
        die(2, "simavr does not know the MCU %s", mcu);
    avr_init(H.avr);
    H.avr->log = 0;
    fw.frequency = (uint32_t)freq;
    avr_load_firmware(H.avr, &fw);
    H.avr->frequency = (uint32_t)freq;
    H.avr->sleep = no_sleep;
    H.cycles_per_us = freq / 1000000;

    for (int k = 0; k < H.traj.n_pods; k++) {
        pod_t *p = &H.pods[k];
        p->index = k;
        p->count = row_count(0, k);
        p->pin_a = avr_io_getirq(H.avr, AVR_IOCTL_IOPORT_GETIRQ('C'), 2 * k);
        p->pin_b = avr_io_getirq(H.avr, AVR_IOCTL_IOPORT_GETIRQ('C'), 2 * k + 1);
        set_pins(p);
    }
    avr_irq_register_notify(avr_io_getirq(H.avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUTPUT),
                            uart_out, NULL);
    avr_irq_register_notify(avr_iomem_getirq(H.avr, ADDR_PINC, NULL, AVR_IOMEM_IRQ_ALL),
                            pinc_read, NULL);
    avr_irq_register_notify(avr_iomem_getirq(H.avr, ADDR_PORTC, NULL, AVR_IOMEM_IRQ_ALL),
                            portc_access, NULL);
    avr_irq_register_notify(avr_iomem_getirq(H.avr, ADDR_DDRC, NULL, AVR_IOMEM_IRQ_ALL),
                            portc_access, NULL);
    avr_irq_register_notify(avr_iomem_getirq(H.avr, ADDR_TCCR1B, NULL, AVR_IOMEM_IRQ_ALL),
                            tccr1b_access, NULL);
    on_boot();

    if (own_pty)
        H.fd = open_own_pty();
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);

    int64_t pace_cycles = PACE_US * H.cycles_per_us;
    int64_t next_pace = pace_cycles;
    int64_t anchor_cycle = 0, anchor_ns = now_ns();
    int64_t run_cycle = (int64_t)H.avr->cycle, run_ns = anchor_ns, ran_ns = 0;
    int next_reset = 0;
    while (!H.quit && !got_signal) {
        avr_t *avr = H.avr;
        int64_t cycle = (int64_t)avr->cycle;
        if (cycle >= next_pace) {
            next_pace = cycle + pace_cycles;
            flush_output();
            read_commands(0);
            if (H.speed > 0) {
                int64_t due = anchor_ns +
                              (int64_t)((double)(cycle - anchor_cycle) * 1000.0 /
                                        ((double)H.cycles_per_us * H.speed));
                int64_t now = now_ns();
                if (due - now > 0) {
                    struct timespec ts = {(time_t)((due - now) / 1000000000LL),
                                          (long)((due - now) % 1000000000LL)};
                    nanosleep(&ts, NULL);
                } else if (now - due > BEHIND_NS) {
                    anchor_cycle = cycle;
                    anchor_ns = now;
                }
            }
            if (H.origin >= 0 && next_reset < H.n_reset_at && H.reset_due_cycle < 0) {
                request_reset(H.reset_at_us[next_reset++]);
            }
            if (trajectory_over(cycle) && H.hold_until < 0) {
                flush_output();
                ran_ns = now_ns(); /* simulated time stops here */
                event("end traj_us %lld bytes %llu", (long long)traj_us_of(cycle),
                      (unsigned long long)H.bytes_total);
                while (!H.quit && !got_signal) /* keep the pty until told to go */
                    read_commands(100);
                break;
            }
        }
        if (H.reset_due_cycle >= 0 && cycle >= H.reset_due_cycle)
            apply_reset(); /* during a hold too: it starts the hold over, as RESET does */
        if (H.hold_until >= 0) {
            int64_t target = H.hold_until < next_pace ? H.hold_until : next_pace;
            if (H.reset_due_cycle >= 0 && H.reset_due_cycle < target)
                target = H.reset_due_cycle;
            if (target < (int64_t)avr->cycle)
                target = (int64_t)avr->cycle;
            avr->cycle = (avr_cycle_count_t)target;
            avr_cycle_timer_process(avr);
            if ((int64_t)avr->cycle >= H.hold_until)
                end_hold();
            continue;
        }
        int state = avr_run(avr);
        if (state == cpu_Done || state == cpu_Crashed)
            die(3, "the simulated MCU stopped (state %d) at cycle %llu", state,
                (unsigned long long)avr->cycle);
    }
    flush_output();
    /* what pacing achieved: the host may have held simulated time back (never skipped) */
    event("ran sim_us %lld wall_us %lld",
          (long long)(((int64_t)H.avr->cycle - run_cycle) / H.cycles_per_us),
          (long long)(((ran_ns ? ran_ns : now_ns()) - run_ns) / 1000));
    return 0;
}
