/*
 * configs.c - the kernel configurations: one row per distinct kernel call. Which one runs a problem is the policy's
 * choice (policy.c); which shapes each family can hold at all is the family's own answer (cuda/).
 */
#include "configs.h"

#include <string.h>

/* ---- whole-matrix families: one launch factors every matrix ---- */

static int whole_holds(const qr2_config* c, int64_t m, int64_t n, const qr2_device* dev) {
    return c->family->kernel_holds(m, n, c->cluster, dev);
}

static int64_t no_workspace(const qr2_config* c, const qr2_problem* p) {
    (void)c, (void)p;
    return 0;
}

static int whole_run(const qr2_config* c, const qr2_problem* p, float* work) {
    (void)work;
    const qr2_whole_qr_args a = {
        .batch = p->batch, .m = p->m, .n = p->n,
        .src = p->a, .src_rs = p->a_rs, .src_cs = p->a_cs, .src_bs = p->a_bs,
        .h = p->h, .tau = p->tau,
    };
    return c->family->kernel_run(&a, c->cluster, p->dev, p->stream);
}

static const qr2_family quad = {"quad", whole_holds, no_workspace, whole_run, qr2_quad_holds, qr2_quad_run};
static const qr2_family warp = {"warp", whole_holds, no_workspace, whole_run, qr2_warp_holds, qr2_warp_run};
static const qr2_family builder = {"builder", whole_holds, no_workspace, whole_run, qr2_builder_holds,
                                   qr2_builder_run};
static const qr2_family registers = {"registers", whole_holds, no_workspace, whole_run, qr2_registers_holds,
                                     qr2_registers_run};
static const qr2_family shared_memory = {"shared_memory", whole_holds, no_workspace, whole_run,
                                         qr2_shared_memory_holds, qr2_shared_memory_run};

/* ---- the blocked family: panels and compact-WY updates (blocked.c) ---- */

static const qr2_family blocked = {"blocked", qr2_blocked_holds, qr2_blocked_workspace_floats, qr2_blocked_run, 0, 0};

/* ---- the configurations ---- */

/* name, family, cluster, nb, leaf_nb, what, cholqr, lookahead */
const qr2_config qr2_quad = {"quad", &quad, 1, 0, 0,
    "m, n <= 64 factored whole by one thread block each, a quad of four lanes per column (a quarter of its rows "
    "each): two shuffles per dot, one block barrier per reflector", 0, 0};
const qr2_config qr2_warp = {"warp", &warp, 1, 0, 0,
    "n <= 64 (m <= 64; m <= 96 for n <= 32) factored whole by one warp each, a lane per column (two for n > 32): dots "
    "are a lane's own FMAs, each reflector published through shared memory, several matrices per block", 0, 0};
const qr2_config qr2_builder = {"builder", &builder, 1, 0, 0,
    "m, n <= 176 factored whole by one thread block each: column warps holding two columns a thread apply the "
    "reflectors while a builder warp builds the next from its column over 32 lanes; one block barrier per reflector",
    0, 0};
const qr2_config qr2_builder_cluster2 = {"builder_cluster2", &builder, 2, 0, 0,
    "the builder kernel on a 2-block cluster per matrix: block 0 factors the left half of the columns and forwards "
    "each reflector by st.async into block 1, which applies them as they land and then factors the rest", 0, 0};
const qr2_config qr2_builder_cluster3 = {"builder_cluster3", &builder, 3, 0, 0,
    "the builder kernel on a 3-block cluster per matrix (m, n <= 256): each block factors a third of the columns "
    "after applying the reflectors forwarded from the blocks before it", 0, 0};
const qr2_config qr2_registers = {"registers", &registers, 1, 0, 0,
    "m, n <= 256 whose columns, dealt cyclically to the warps, fit one block's registers, factored whole in one "
    "launch: each reflector built by its column's warp and published in shared memory behind its own mbarrier", 0, 0};
const qr2_config qr2_registers_cluster2 = {"registers_cluster2", &registers, 2, 0, 0,
    "the registers kernel on a 2-block cluster per matrix: the columns dealt to both blocks' warps, reflectors "
    "forwarded by st.async into the other block's shared memory", 0, 0};
const qr2_config qr2_shared_memory = {"shared_memory", &shared_memory, 1, 0, 0,
    "tall matrices of a few columns factored whole in one block's shared memory (sums of squares and scalars in "
    "FP64): one launch", 0, 0};
const qr2_config qr2_blocked_cholqr_nb32_lookahead = {"blocked_cholqr_nb32_lookahead", &blocked, 1, 32, 32,
    "blocked_cholqr_nb32 with lookahead: each next panel factored on a side stream of the device's highest priority "
    "(its columns updated first, by the CholeskyQR panel itself where it factors them) beside the update of the rest",
    1, 1};
const qr2_config qr2_blocked_cholqr_nb32 = {"blocked_cholqr_nb32", &blocked, 1, 32, 32,
    "blocked_nb32 whose 32-column panels of 513 to 4096 rows are first factored by CholeskyQR2 in FP64 on a cluster "
    "of up to 16 blocks (Gram matrices on FP64 tensor cores) and turned back into Householder form; a matrix whose "
    "panel fails the guard takes the Householder panel", 1, 0};
const qr2_config qr2_blocked_nb64 = {"blocked_nb64", &blocked, 1, 64, 32,
    "blocked_nb32 with 64-column outer panels: each factored as two 32-column panels with an update between them, "
    "then applied to the rest of the matrix at once (T merged from the halves' T factors)", 0, 0};
const qr2_config qr2_blocked_nb32 = {"blocked_nb32", &blocked, 1, 32, 32,
    "blocked Householder with 32-column panels, any shape: panels of up to 512 rows by the registers kernel in "
    "panel mode, taller ones across a thread-block cluster, the tallest by many blocks a matrix; each writes V (and "
    "T). The trailing update C -= V (T^T (V^T C)) is one kernel on tensor cores at FP32 accuracy (3xTF32)", 0, 0};

/* The table, in the order the README's route map lists it. */
static const qr2_config* const configs[] = {&qr2_quad, &qr2_warp, &qr2_builder, &qr2_builder_cluster2,
                                            &qr2_builder_cluster3, &qr2_registers, &qr2_registers_cluster2,
                                            &qr2_shared_memory, &qr2_blocked_cholqr_nb32_lookahead,
                                            &qr2_blocked_cholqr_nb32, &qr2_blocked_nb64,
                                            &qr2_blocked_nb32};
enum { CONFIG_COUNT = sizeof configs / sizeof configs[0] };

int qr2_config_holds(const qr2_config* c, int64_t m, int64_t n, const qr2_device* dev) {
    if (c->cluster > 1 && !dev->clusters) return 0;
    return c->family->holds(c, m, n, dev);
}

/* ---- introspection ---- */

/* Blocked configurations not yet measured against the rows above, so the policy never picks them: only forcing reaches
 * them (tests and tools). The lookahead rows (blocked.c) are their base rows with lookahead set. */
static const qr2_config blocked_nb64_lookahead = {"blocked_nb64_lookahead", &blocked, 1, 64, 32,
    "blocked_nb64 with lookahead", 0, 1};
static const qr2_config blocked_nb32_lookahead = {"blocked_nb32_lookahead", &blocked, 1, 32, 32,
    "blocked_nb32 with lookahead", 0, 1};
static const qr2_config* const unmeasured[] = {&blocked_nb64_lookahead, &blocked_nb32_lookahead};

static const qr2_config* by_name(const char* name) {
    for (int i = 0; name && i < CONFIG_COUNT; ++i)
        if (strcmp(configs[i]->name, name) == 0) return configs[i];
    for (int i = 0; name && i < (int)(sizeof unmeasured / sizeof unmeasured[0]); ++i)
        if (strcmp(unmeasured[i]->name, name) == 0) return unmeasured[i];
    return 0;
}

static qr2_device described(int sms, int smem_optin, int clusters) {
    const qr2_device d = {.index = 0, .sms = sms, .smem_optin = smem_optin, .clusters = clusters};
    return d;
}

int qr2_config_count(void) { return CONFIG_COUNT; }
const char* qr2_config_name(int i) { return i >= 0 && i < CONFIG_COUNT ? configs[i]->name : 0; }
const char* qr2_config_family(int i) { return i >= 0 && i < CONFIG_COUNT ? configs[i]->family->name : 0; }
const char* qr2_config_description(int i) { return i >= 0 && i < CONFIG_COUNT ? configs[i]->what : 0; }

int qr2_config_index_for(int64_t m, int64_t n, int64_t batch, int sms, int smem_optin, int clusters) {
    const qr2_device d = described(sms, smem_optin, clusters);
    const qr2_config* c = qr2_policy_pick(m, n, batch, &d);
    for (int i = 0; i < CONFIG_COUNT; ++i)
        if (configs[i] == c) return i;
    return -1;
}

int qr2_config_can_run(const char* name, int64_t m, int64_t n, int sms, int smem_optin, int clusters) {
    const qr2_config* c = by_name(name);
    const qr2_device d = described(sms, smem_optin, clusters);
    return c ? qr2_config_holds(c, m, n, &d) : -1;
}

int qr2_config_blocked_halves(int64_t m, int64_t n, int64_t batch, int sms, int smem_optin, int clusters) {
    const qr2_device d = described(sms, smem_optin, clusters);
    return qr2_blocked_halves(m, n, batch, &d);
}

int64_t qr2_config_workspace_bytes(const char* name, int64_t m, int64_t n, int64_t batch, int sms, int smem_optin,
                                   int clusters) {
    const qr2_config* c = by_name(name);
    const qr2_device d = described(sms, smem_optin, clusters);
    const qr2_problem p = {.batch = batch, .m = (int)m, .n = (int)n, .dev = &d};
    return c ? 4 * c->family->workspace_floats(c, &p) : -1;
}

/* ---- forcing, for tests and tools ---- */

static int empty_run(const qr2_config* c, const qr2_problem* p, float* work) {
    (void)c, (void)work;
    return qr2_empty_run(p->stream);
}

static int any_shape(const qr2_config* c, int64_t m, int64_t n, const qr2_device* dev) {
    (void)c, (void)m, (void)n, (void)dev;
    return 1;
}

static const qr2_family empty = {"empty", any_shape, no_workspace, empty_run, 0, 0};
static const qr2_config empty_kernel = {"empty_kernel", &empty, 1, 0, 0, "one empty kernel; H and tau are left unset",
                                        0, 0};

static const qr2_config* forced; /* see qr2_config_force */

const qr2_config* qr2_config_forced(void) { return forced; }

int qr2_config_force(const char* name) {
    forced = name && strcmp(name, empty_kernel.name) == 0 ? &empty_kernel : by_name(name);
    return forced || !name ? 0 : -1;
}
