/*
 * resverify_engine.c: an external engine for resverify, written from
 * docs/external-protocol.md alone. It reads one JSON document per line on stdin and
 * answers each with one JSON line on stdout: the hello with its capabilities, every
 * request with a result (the output and the gradient of every input, and in forward mode
 * the output tangent) or a typed error.
 *
 * float64 is computed in double; float32 in double with every operation rounded to float
 * at once (exactly float arithmetic, since double holds a float sum or product exactly
 * before that rounding; a quotient or square root rounded twice, to double then to float,
 * is still correctly rounded, double having more than twice float's precision). Numbers are read with strtod / strtof (hex floats, decimals, inf,
 * nan; each rounded once to the dtype) and written with printf's %a, so no bit is lost.
 *
 * Build: cc -O2 -std=c11 -o resverify-engine resverify_engine.c -lm
 * Use:   resverify check --backend 'cmd:./resverify-engine'
 *
 * -DRESVERIFY_BUG_NORM_DETACHED builds a deliberately broken engine whose norms treat
 * their statistics (the mean and r) as constants when differentiating, as a model that
 * detaches them would: its gradient is r·ḡ and its tangent r·ṫ. The tests build it to show
 * the norm properties catch the bug; its hello says so in "about".
 */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_RANK = 16 };

/* ---------- a tiny JSON reader: a tree of values, freed after every line ---------- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } JType;

typedef struct JVal {
    JType type;
    char *text;           /* string contents, or a number's literal text */
    int count;            /* items of an array or members of an object */
    struct JVal **items;
    char **keys;          /* member names of an object */
} JVal;

static void **allocs;     /* everything allocated while answering one line */
static size_t n_allocs, cap_allocs;

static void *grab(size_t size) {
    void *p = calloc(1, size ? size : 1);
    if (!p) { fputs("resverify_engine: out of memory\n", stderr); exit(70); }
    if (n_allocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 256;
        allocs = realloc(allocs, cap_allocs * sizeof *allocs);
        if (!allocs) { fputs("resverify_engine: out of memory\n", stderr); exit(70); }
    }
    allocs[n_allocs++] = p;
    return p;
}

static void release_all(void) {
    for (size_t i = 0; i < n_allocs; i++) free(allocs[i]);
    n_allocs = 0;
}

static char failure[512]; /* the message of the first error while reading or running */
static char failure_kind[32];
static long mismatch[2][MAX_RANK + 1]; /* [rank, dims...] of a shape_mismatch pair */

static int fail(const char *kind, const char *fmt, ...) {
    if (!failure_kind[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(failure, sizeof failure, fmt, ap);
        va_end(ap);
        snprintf(failure_kind, sizeof failure_kind, "%s", kind);
    }
    return 0;
}

static const char *cur;

static void skip_space(void) { while (*cur == ' ' || *cur == '\t' || *cur == '\r' || *cur == '\n') cur++; }

static JVal *parse_value(int depth);

static void put_utf8(char *out, size_t *n, unsigned code) {
    if (code < 0x80) out[(*n)++] = (char)code;
    else if (code < 0x800) { out[(*n)++] = (char)(0xC0 | code >> 6); out[(*n)++] = (char)(0x80 | (code & 0x3F)); }
    else { out[(*n)++] = (char)(0xE0 | code >> 12); out[(*n)++] = (char)(0x80 | ((code >> 6) & 0x3F)); out[(*n)++] = (char)(0x80 | (code & 0x3F)); }
}

static char *parse_string(void) {
    if (*cur != '"') { fail("backend_error", "bad request: expected a string"); return NULL; }
    const char *start = ++cur;
    size_t len = 0;
    while (*cur && *cur != '"') { if (*cur == '\\' && cur[1]) cur++; cur++; len++; }
    if (*cur != '"') { fail("backend_error", "bad request: unterminated string"); return NULL; }
    char *out = grab(3 * len + 1);
    size_t n = 0;
    for (const char *p = start; p < cur; p++) {
        if (*p != '\\') { out[n++] = *p; continue; }
        p++;
        switch (*p) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'u': {
            unsigned code = 0;
            for (int i = 0; i < 4 && p[1]; i++) {
                char c = *++p;
                code = code * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 32) - 'a' + 10);
            }
            put_utf8(out, &n, code);
            break;
        }
        default: out[n++] = *p;
        }
    }
    cur++;
    return out;
}

static JVal *parse_value(int depth) {
    skip_space();
    if (depth > 64) { fail("backend_error", "bad request: nested too deeply"); return NULL; }
    JVal *v = grab(sizeof *v);
    if (*cur == '{' || *cur == '[') {
        int object = *cur++ == '{';
        v->type = object ? J_OBJ : J_ARR;
        int cap = 0;
        skip_space();
        if (*cur == (object ? '}' : ']')) { cur++; return v; }
        for (;;) {
            if (v->count == cap) {
                cap = cap ? 2 * cap : 8;
                JVal **items = grab((size_t)cap * sizeof *items);
                char **keys = grab((size_t)cap * sizeof *keys);
                if (v->count) {
                    memcpy(items, v->items, (size_t)v->count * sizeof *items);
                    memcpy(keys, v->keys, (size_t)v->count * sizeof *keys);
                }
                v->items = items;
                v->keys = keys;
            }
            if (object) {
                skip_space();
                if (!(v->keys[v->count] = parse_string())) return NULL;
                skip_space();
                if (*cur++ != ':') { fail("backend_error", "bad request: expected ':'"); return NULL; }
            }
            if (!(v->items[v->count++] = parse_value(depth + 1))) return NULL;
            skip_space();
            if (*cur == ',') { cur++; continue; }
            if (*cur == (object ? '}' : ']')) { cur++; return v; }
            fail("backend_error", "bad request: expected ',' or a closing bracket");
            return NULL;
        }
    }
    if (*cur == '"') { v->type = J_STR; return (v->text = parse_string()) ? v : NULL; }
    if (!strncmp(cur, "null", 4)) { cur += 4; v->type = J_NULL; return v; }
    if (!strncmp(cur, "true", 4)) { cur += 4; v->type = J_BOOL; return v; }
    if (!strncmp(cur, "false", 5)) { cur += 5; v->type = J_BOOL; return v; }
    const char *start = cur;
    while (*cur && strchr("+-0123456789.eE", *cur)) cur++;
    if (cur == start) { fail("backend_error", "bad request: unexpected character"); return NULL; }
    v->type = J_NUM;
    v->text = grab((size_t)(cur - start) + 1);
    memcpy(v->text, start, (size_t)(cur - start));
    return v;
}

static JVal *member(const JVal *obj, const char *key) {
    if (!obj || obj->type != J_OBJ) return NULL;
    for (int i = 0; i < obj->count; i++) if (!strcmp(obj->keys[i], key)) return obj->items[i];
    return NULL;
}

/* ---------- tensors ---------- */

typedef struct {
    const char *name;
    int rank;
    long shape[MAX_RANK];
    long size;
    double *value;
    double *grad; /* NULL until a cotangent reaches it */
    double *tangent; /* forward mode only: the derivative along the input tangents */
} Tensor;

typedef struct {
    const char *name, *op;
    const char *args[2];
    int nargs;
    double alpha;   /* scale's alpha, or a norm's eps, rounded to the dtype */
    double *r;      /* a norm's 1/sqrt(mean(c²) + ε), one per row of its last axis */
    Tensor *out;
} Node;

static int single; /* 1 for a float32 request: round every operation to float */

static double rnd(double x) { return single ? (double)(float)x : x; }

/* 1/(1 + exp(-x)), or exp(x)/(1 + exp(x)) below 0 (exp never overflows there, so a tiny
 * sigmoid keeps its relative accuracy), in double. */
static double sigmoid(double x) {
    double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

static double number(const JVal *v) {
    const char *text = v ? v->text : NULL;
    if (!text || (v->type != J_STR && v->type != J_NUM)) {
        fail("backend_error", "bad request: a value is not a number");
        return 0;
    }
    char *end;
    double x = single ? (double)strtof(text, &end) : strtod(text, &end);
    if (end == text || *end) fail("backend_error", "bad request: cannot read the number %.40s", text);
    return x;
}

static int read_shape(const JVal *v, Tensor *t) {
    if (!v || v->type != J_ARR || v->count > MAX_RANK) return fail("backend_error", "bad request: bad shape");
    t->rank = v->count;
    t->size = 1;
    for (int i = 0; i < v->count; i++) {
        t->shape[i] = v->items[i]->text ? strtol(v->items[i]->text, NULL, 10) : -1;
        if (t->shape[i] < 0) return fail("backend_error", "bad request: bad dimension");
        t->size *= t->shape[i];
    }
    return 1;
}

static Tensor *new_tensor(const char *name, int rank, const long *shape) {
    Tensor *t = grab(sizeof *t);
    t->name = name;
    t->rank = rank;
    t->size = 1;
    for (int i = 0; i < rank; i++) { t->shape[i] = shape[i]; t->size *= shape[i]; }
    t->value = grab((size_t)t->size * sizeof(double));
    return t;
}

static int read_array(const JVal *v, Tensor *t) {
    const JVal *data = member(v, "data");
    if (!read_shape(member(v, "shape"), t)) return 0;
    if (!data || data->type != J_ARR || data->count != t->size)
        return fail("backend_error", "bad request: %s: data does not fill its shape", t->name);
    t->value = grab((size_t)t->size * sizeof(double));
    for (long i = 0; i < t->size; i++) t->value[i] = number(data->items[i]);
    return !failure_kind[0];
}

static int same_shape(const Tensor *a, const Tensor *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++) if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static void shape_text(char *out, size_t size, const Tensor *t) {
    size_t n = (size_t)snprintf(out, size, "[");
    for (int i = 0; i < t->rank && n < size; i++)
        n += (size_t)snprintf(out + n, size - n, i ? ", %ld" : "%ld", t->shape[i]);
    if (n < size) snprintf(out + n, size - n, "]");
}

static int refuse_pair(const char *op, const Tensor *a, const Tensor *b) {
    const Tensor *pair[2] = {a, b};
    char left[160], right[160];
    for (int k = 0; k < 2; k++) {
        mismatch[k][0] = pair[k]->rank;
        for (int i = 0; i < pair[k]->rank; i++) mismatch[k][i + 1] = pair[k]->shape[i];
    }
    shape_text(left, sizeof left, a);
    shape_text(right, sizeof right, b);
    return fail("shape_mismatch", "%s: %s %s and %s %s do not fit", op, a->name, left, b->name, right);
}

static void add_grad(Tensor *t, long i, double g) {
    if (!t->grad) t->grad = grab((size_t)(t->size ? t->size : 1) * sizeof(double));
    t->grad[i] = rnd(t->grad[i] + g);
}

/* The flat index into t of the element that broadcasts to out's flat index i. */
static long broadcast_index(const Tensor *out, const Tensor *t, long i) {
    long index = 0, stride = 1;
    for (int d = out->rank - 1, e = t->rank - 1; d >= 0; d--, e--) {
        long pos = i % out->shape[d];
        i /= out->shape[d];
        if (e >= 0) {
            if (t->shape[e] != 1) index += pos * stride;
            stride *= t->shape[e];
        }
    }
    return index;
}

static Tensor *broadcast_op(Node *n, Tensor *a, Tensor *b, int product) {
    long shape[MAX_RANK];
    int rank = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 1; i <= rank; i++) {
        long x = i <= a->rank ? a->shape[a->rank - i] : 1, y = i <= b->rank ? b->shape[b->rank - i] : 1;
        if (x != y && x != 1 && y != 1) { refuse_pair(n->op, a, b); return NULL; }
        shape[rank - i] = x == 1 ? y : x;
    }
    Tensor *out = new_tensor(n->name, rank, shape);
    for (long i = 0; i < out->size; i++) {
        double x = a->value[broadcast_index(out, a, i)], y = b->value[broadcast_index(out, b, i)];
        out->value[i] = rnd(product ? x * y : x + y);
    }
    return out;
}

/* ---------- the norms: over the last axis, y = c·r with r = 1/sqrt(mean(c²) + ε) ----------
 * c is the row minus its mean (layer_norm) or the row itself (rms_norm). Every mean is
 * summed in order and divided once, each step rounded to the dtype. */

#ifdef RESVERIFY_BUG_NORM_DETACHED
#define NORM_DETACHED 1
#else
#define NORM_DETACHED 0
#endif

static int is_norm(const char *op) { return !strcmp(op, "layer_norm") || !strcmp(op, "rms_norm"); }

static double mean_of(const double *v, long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = rnd(s + v[i]);
    return rnd(s / (double)n);
}

static double mean_of_products(const double *u, const double *v, long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = rnd(s + rnd(u[i] * v[i]));
    return rnd(s / (double)n);
}

/* v minus its mean for layer_norm, v itself for rms_norm, into out. */
static void centre(const char *op, const double *v, long n, double *out) {
    int centred = !strcmp(op, "layer_norm");
    double mu = centred ? mean_of(v, n) : 0.0;
    for (long i = 0; i < n; i++) out[i] = centred ? rnd(v[i] - mu) : v[i];
}

/* The length of the last axis and the number of rows along it. */
static long norm_rows(const Tensor *a, long *len) {
    *len = a->shape[a->rank - 1];
    return *len ? a->size / *len : 0;
}

static Tensor *norm_forward(Node *n, Tensor *a) {
    if (a->rank == 0) { /* no axis to normalise: refused as [] vs [1] */
        mismatch[0][0] = 0;
        mismatch[1][0] = 1;
        mismatch[1][1] = 1;
        fail("shape_mismatch", "%s: %s has rank 0, needs at least one axis", n->op, a->name);
        return NULL;
    }
    Tensor *out = new_tensor(n->name, a->rank, a->shape);
    long len, rows = norm_rows(a, &len);
    double *c = grab((size_t)(len ? len : 1) * sizeof(double));
    n->r = grab((size_t)(rows ? rows : 1) * sizeof(double));
    for (long row = 0; row < rows; row++) {
        centre(n->op, a->value + row * len, len, c);
        double r = n->r[row] = rnd(1.0 / rnd(sqrt(rnd(mean_of_products(c, c, len) + n->alpha))));
        for (long i = 0; i < len; i++) out->value[row * len + i] = rnd(c[i] * r);
    }
    return out;
}

/* ā = r·(ḡ − mean(ḡ) − y·mean(ḡ·y)) per row (without mean(ḡ) for rms_norm). */
static void norm_backward(Node *n, Tensor *a) {
    const Tensor *out = n->out;
    long len, rows = norm_rows(a, &len);
    double *d = grab((size_t)(len ? len : 1) * sizeof(double));
    for (long row = 0; row < rows; row++) {
        const double *g = out->grad + row * len, *y = out->value + row * len;
        double r = n->r[row], m = mean_of_products(g, y, len);
        centre(n->op, g, len, d);
        for (long i = 0; i < len; i++)
            add_grad(a, row * len + i, NORM_DETACHED ? rnd(r * g[i]) : rnd(r * rnd(d[i] - rnd(y[i] * m))));
    }
}

/* ṫ = r·(d − y·mean(y·d)) per row, d the centred tangent (the tangent itself for rms_norm). */
static void norm_tangent(Node *n, const Tensor *a, double *t) {
    const Tensor *out = n->out;
    long len, rows = norm_rows(a, &len);
    double *d = grab((size_t)(len ? len : 1) * sizeof(double));
    for (long row = 0; row < rows; row++) {
        const double *ta = a->tangent + row * len, *y = out->value + row * len;
        double r = n->r[row];
        centre(n->op, ta, len, d);
        double m = mean_of_products(y, d, len);
        for (long i = 0; i < len; i++)
            t[row * len + i] = NORM_DETACHED ? rnd(r * ta[i]) : rnd(r * rnd(d[i] - rnd(y[i] * m)));
    }
}

static Tensor *forward(Node *n, Tensor *a, Tensor *b) {
    const char *op = n->op;
    if (is_norm(op)) return norm_forward(n, a);
    if (!strcmp(op, "add")) return broadcast_op(n, a, b, 0);
    if (!strcmp(op, "mul")) return broadcast_op(n, a, b, 1);
    if (!strcmp(op, "residual_add")) {
        if (!same_shape(a, b)) { refuse_pair(op, a, b); return NULL; }
        return broadcast_op(n, a, b, 0);
    }
    if (!strcmp(op, "linear")) {
        if (a->rank < 1 || b->rank != 2 || a->shape[a->rank - 1] != b->shape[0]) {
            refuse_pair(op, a, b);
            return NULL;
        }
        long shape[MAX_RANK], d_in = b->shape[0], d_out = b->shape[1];
        memcpy(shape, a->shape, sizeof shape);
        shape[a->rank - 1] = d_out;
        Tensor *out = new_tensor(n->name, a->rank, shape);
        for (long r = 0; r < out->size / (d_out ? d_out : 1) && d_out; r++)
            for (long j = 0; j < d_out; j++) {
                double s = 0;
                for (long k = 0; k < d_in; k++) s = rnd(s + rnd(a->value[r * d_in + k] * b->value[k * d_out + j]));
                out->value[r * d_out + j] = s;
            }
        return out;
    }
    if (!strcmp(op, "sum")) {
        Tensor *out = new_tensor(n->name, 0, NULL);
        double s = 0;
        for (long i = 0; i < a->size; i++) s = rnd(s + a->value[i]);
        out->value[0] = s;
        return out;
    }
    Tensor *out = new_tensor(n->name, a->rank, a->shape);
    for (long i = 0; i < a->size; i++) {
        double x = a->value[i];
        if (!strcmp(op, "scale")) out->value[i] = rnd(x * n->alpha);
        else if (!strcmp(op, "relu")) out->value[i] = x > 0 ? x : 0.0;
        else if (!strcmp(op, "tanh")) out->value[i] = rnd(tanh(x));
        else if (!strcmp(op, "sigmoid")) out->value[i] = rnd(sigmoid(x));
        else { fail("unsupported", "op %s is not implemented", op); return NULL; }
    }
    return out;
}

/* Push the arguments' tangents forward into n's (the local Jacobian-vector product),
 * computed beside the value and rounded like it, one operation at a time. */
static void push_tangent(Node *n, Tensor *a, Tensor *b) {
    Tensor *out = n->out;
    const char *op = n->op;
    double *t = out->tangent = grab((size_t)(out->size ? out->size : 1) * sizeof(double));
    if (is_norm(op)) {
        norm_tangent(n, a, t);
    } else if (!strcmp(op, "add") || !strcmp(op, "residual_add") || !strcmp(op, "mul")) {
        int product = !strcmp(op, "mul");
        for (long i = 0; i < out->size; i++) {
            long ia = broadcast_index(out, a, i), ib = broadcast_index(out, b, i);
            t[i] = product ? rnd(rnd(a->tangent[ia] * b->value[ib]) + rnd(a->value[ia] * b->tangent[ib]))
                           : rnd(a->tangent[ia] + b->tangent[ib]);
        }
    } else if (!strcmp(op, "linear")) { /* t_x @ w + x @ t_w: one dot of length 2 d_in */
        long d_in = b->shape[0], d_out = b->shape[1];
        for (long r = 0; d_out && r < out->size / d_out; r++)
            for (long j = 0; j < d_out; j++) {
                double s = 0;
                for (long k = 0; k < d_in; k++) {
                    s = rnd(s + rnd(a->tangent[r * d_in + k] * b->value[k * d_out + j]));
                    s = rnd(s + rnd(a->value[r * d_in + k] * b->tangent[k * d_out + j]));
                }
                t[r * d_out + j] = s;
            }
    } else if (!strcmp(op, "sum")) {
        for (long i = 0; i < a->size; i++) t[0] = rnd(t[0] + a->tangent[i]);
    } else {
        for (long i = 0; i < a->size; i++) {
            double x = a->value[i], y = out->value[i], ta = a->tangent[i];
            if (!strcmp(op, "scale")) t[i] = rnd(ta * n->alpha);
            else if (!strcmp(op, "relu")) t[i] = x > 0 ? ta : 0.0;
            else if (!strcmp(op, "sigmoid")) t[i] = rnd(ta * rnd(y * rnd(1.0 - y)));
            else t[i] = rnd(ta * rnd(1.0 - rnd(y * y)));
        }
    }
}

/* Pull n's cotangent back into its arguments' grads (the local vector-Jacobian product). */
static void backward(Node *n, Tensor *a, Tensor *b) {
    Tensor *out = n->out;
    const char *op = n->op;
    if (!out->grad) return; /* nothing reached this node */
    const double *g = out->grad;
    if (is_norm(op)) {
        norm_backward(n, a);
    } else if (!strcmp(op, "add") || !strcmp(op, "residual_add") || !strcmp(op, "mul")) {
        int product = !strcmp(op, "mul");
        for (long i = 0; i < out->size; i++) {
            long ia = broadcast_index(out, a, i), ib = broadcast_index(out, b, i);
            add_grad(a, ia, product ? rnd(g[i] * b->value[ib]) : g[i]);
            add_grad(b, ib, product ? rnd(g[i] * a->value[ia]) : g[i]);
        }
    } else if (!strcmp(op, "linear")) {
        long d_in = b->shape[0], d_out = b->shape[1], rows = d_in ? a->size / d_in : 0;
        for (long r = 0; r < rows; r++)
            for (long k = 0; k < d_in; k++) {
                double s = 0;
                for (long j = 0; j < d_out; j++) s = rnd(s + rnd(g[r * d_out + j] * b->value[k * d_out + j]));
                add_grad(a, r * d_in + k, s);
            }
        for (long k = 0; k < d_in; k++)
            for (long j = 0; j < d_out; j++) {
                double s = 0;
                for (long r = 0; r < rows; r++) s = rnd(s + rnd(a->value[r * d_in + k] * g[r * d_out + j]));
                add_grad(b, k * d_out + j, s);
            }
    } else if (!strcmp(op, "sum")) {
        for (long i = 0; i < a->size; i++) add_grad(a, i, g[0]);
    } else {
        for (long i = 0; i < a->size; i++) {
            double x = a->value[i], t = out->value[i];
            if (!strcmp(op, "scale")) add_grad(a, i, rnd(g[i] * n->alpha));
            else if (!strcmp(op, "relu")) add_grad(a, i, x > 0 ? g[i] : 0.0);
            else if (!strcmp(op, "sigmoid")) add_grad(a, i, rnd(g[i] * rnd(t * rnd(1.0 - t))));
            else add_grad(a, i, rnd(g[i] * rnd(1.0 - rnd(t * t))));
        }
    }
}

/* ---------- writing answers ---------- */

static void put_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void put_shape(int rank, const long *shape) {
    putchar('[');
    for (int i = 0; i < rank; i++) printf(i ? ", %ld" : "%ld", shape[i]);
    putchar(']');
}

static void put_array(const Tensor *t, const double *values) {
    printf("{\"shape\": ");
    put_shape(t->rank, t->shape);
    printf(", \"data\": [");
    for (long i = 0; i < t->size; i++) printf(i ? ", \"%a\"" : "\"%a\"", values ? values[i] : 0.0);
    printf("]}");
}

static void put_error(void) {
    printf("{\"resverify\": 1, \"kind\": \"result\", \"error\": {\"kind\": ");
    put_string(failure_kind);
    printf(", \"message\": ");
    put_string(failure);
    printf(", \"shapes\": ");
    if (!strcmp(failure_kind, "shape_mismatch")) {
        printf("[");
        put_shape((int)mismatch[0][0], mismatch[0] + 1);
        printf(", ");
        put_shape((int)mismatch[1][0], mismatch[1] + 1);
        printf("]");
    } else {
        printf("null");
    }
    printf("}}\n");
}

static const char *OPS[] = {"add", "layer_norm", "linear", "mul", "relu", "residual_add", "rms_norm",
                            "scale", "sigmoid", "sum", "tanh"};
static const int ARITY[] = {2, 1, 2, 2, 1, 2, 1, 1, 1, 1, 1};

#define ENGINE_VERSION "1.4"
#if defined(__clang__)
#define COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER "gcc " __VERSION__
#else
#define COMPILER "unknown"
#endif
#if NORM_DETACHED
#define BUG ", \"bug\": \"RESVERIFY_BUG_NORM_DETACHED: the norms' statistics are treated as constants\""
#else
#define BUG ""
#endif

/* Both modes: resverify sends tangents (forward mode) because the hello claims "jvp".
 * The version and the settings that change float32 results (FLT_EVAL_METHOD: whether
 * intermediates are kept wider than their type) go into reports, and so does a bug built in. */
static void hello(void) {
    printf("{\"resverify\": 1, \"kind\": \"capabilities\", \"name\": \"c-engine\", "
           "\"dtypes\": [\"float64\", \"float32\"], \"ops\": [");
    for (size_t i = 0; i < sizeof OPS / sizeof *OPS; i++) printf(i ? ", \"%s\"" : "\"%s\"", OPS[i]);
    printf("], \"device\": \"cpu\", \"modes\": [\"vjp\", \"jvp\"], \"version\": \"%s\", "
           "\"about\": {\"library\": "
           "\"resverify-c-engine\", \"compiler\": \"%.150s\", \"FLT_EVAL_METHOD\": \"%d\"" BUG "}}\n",
           ENGINE_VERSION, COMPILER, (int)FLT_EVAL_METHOD);
}

/* ---------- one request ---------- */

static Tensor *lookup(Tensor **env, int n, const char *name) {
    for (int i = n - 1; i >= 0; i--) if (!strcmp(env[i]->name, name)) return env[i];
    return NULL;
}

/* An exact rational ("n", "p/q" or an integer: scale's alpha, a norm's eps) in the dtype. */
static double read_rational(const JVal *v, const char *op, const char *what) {
    if (!v || !v->text) { fail("backend_error", "bad request: %s needs an %s", op, what); return 0; }
    const char *slash = strchr(v->text, '/');
    double p = strtod(v->text, NULL), q = slash ? strtod(slash + 1, NULL) : 1.0;
    return rnd(p / q);
}

static void request(const JVal *doc) {
    const JVal *dtype = member(doc, "dtype"), *program = member(doc, "program");
    if (!dtype || !dtype->text || !program) { fail("backend_error", "bad request: no dtype or program"); return; }
    if (strcmp(dtype->text, "float64") && strcmp(dtype->text, "float32")) {
        fail("unsupported", "dtype %s is not implemented", dtype->text);
        return;
    }
    single = !strcmp(dtype->text, "float32");
    const JVal *ins = member(program, "inputs"), *nodes = member(program, "nodes");
    const JVal *values = member(doc, "inputs"), *output = member(program, "output");
    if (!ins || ins->type != J_ARR || !nodes || nodes->type != J_ARR || !output || !output->text) {
        fail("backend_error", "bad request: malformed program");
        return;
    }
    int n_env = 0, n_in = ins->count, n_nodes = nodes->count;
    const JVal *tangents = member(doc, "tangents"); /* forward mode when present */
    Tensor **env = grab((size_t)(n_in + n_nodes + 1) * sizeof *env);
    for (int i = 0; i < n_in; i++) {
        Tensor *t = grab(sizeof *t), along = {.name = "tangent"};
        t->name = member(ins->items[i], "name") ? member(ins->items[i], "name")->text : NULL;
        if (!t->name || !read_array(member(values, t->name), t)) {
            fail("backend_error", "bad request: input %d has no values", i);
            return;
        }
        if (tangents && (!read_array(member(tangents, t->name), &along) || !same_shape(t, &along))) {
            fail("backend_error", "bad request: input %s has no tangent of its shape", t->name);
            return;
        }
        t->tangent = along.value;
        env[n_env++] = t;
    }
    /* Nodes may come in any order: run each once all its arguments exist. */
    Node *order = grab((size_t)(n_nodes + 1) * sizeof *order);
    int *done = grab((size_t)(n_nodes + 1) * sizeof *done), n_done = 0;
    while (n_done < n_nodes) {
        int progress = 0;
        for (int i = 0; i < n_nodes && !failure_kind[0]; i++) {
            if (done[i]) continue;
            const JVal *nd = nodes->items[i], *args = member(nd, "args");
            Node n = {0};
            n.name = member(nd, "name") ? member(nd, "name")->text : NULL;
            n.op = member(nd, "op") ? member(nd, "op")->text : NULL;
            if (!n.name || !n.op || !args || args->type != J_ARR || args->count < 1 || args->count > 2) {
                fail("backend_error", "bad request: malformed node %d", i);
                return;
            }
            int known = -1;
            for (size_t k = 0; k < sizeof OPS / sizeof *OPS; k++) if (!strcmp(OPS[k], n.op)) known = (int)k;
            if (known < 0 || ARITY[known] != args->count) {
                fail("unsupported", "op %s is not implemented", n.op);
                return;
            }
            n.nargs = args->count;
            Tensor *a[2] = {NULL, NULL};
            for (int k = 0; k < n.nargs; k++) {
                n.args[k] = args->items[k]->text;
                a[k] = n.args[k] ? lookup(env, n_env, n.args[k]) : NULL;
            }
            if (!a[0] || (n.nargs == 2 && !a[1])) continue; /* an argument is not computed yet */
            if (!strcmp(n.op, "scale")) n.alpha = read_rational(member(nd, "alpha"), n.op, "alpha");
            if (is_norm(n.op)) n.alpha = read_rational(member(nd, "eps"), n.op, "eps");
            if (failure_kind[0] || !(n.out = forward(&n, a[0], a[1]))) return;
            if (tangents) push_tangent(&n, a[0], a[1]);
            env[n_env++] = n.out;
            order[n_done++] = n;
            done[i] = progress = 1;
        }
        if (failure_kind[0]) return;
        if (!progress) { fail("backend_error", "bad request: a node refers to an unknown name"); return; }
    }
    Tensor *out = lookup(env, n_env, output->text);
    const JVal *cot = member(doc, "cotangent");
    if (!out) { fail("backend_error", "bad request: unknown output %s", output->text); return; }
    if (!cot || cot->type == J_NULL) {
        fail("backend_error", "the cotangent is null, but the program's shapes fit");
        return;
    }
    Tensor seed = {.name = "cotangent"};
    if (!read_array(cot, &seed)) return;
    if (!same_shape(&seed, out)) { fail("backend_error", "bad request: the cotangent's shape is not the output's"); return; }
    for (long i = 0; i < out->size; i++) add_grad(out, i, seed.value[i]);
    for (int i = n_done - 1; i >= 0; i--) {
        Tensor *a = lookup(env, n_env, order[i].args[0]);
        Tensor *b = order[i].nargs == 2 ? lookup(env, n_env, order[i].args[1]) : NULL;
        backward(&order[i], a, b);
    }
    printf("{\"resverify\": 1, \"kind\": \"result\", \"dtype\": ");
    put_string(dtype->text);
    printf(", \"output\": ");
    put_array(out, out->value);
    printf(", \"grads\": {");
    for (int i = 0; i < n_in; i++) {
        if (i) printf(", ");
        put_string(env[i]->name);
        printf(": ");
        put_array(env[i], env[i]->grad);
    }
    printf("}");
    if (tangents) {
        printf(", \"tangent\": ");
        put_array(out, out->tangent);
    }
    printf("}\n");
}

int main(void) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        cur = line;
        skip_space();
        if (!*cur) continue;
        failure[0] = failure_kind[0] = '\0';
        JVal *doc = parse_value(0);
        const JVal *kind = member(doc, "kind");
        if (doc && kind && kind->text && !strcmp(kind->text, "hello")) hello();
        else if (doc && kind && kind->text && !strcmp(kind->text, "request")) request(doc);
        else fail("backend_error", "bad request: not a hello or a request");
        if (failure_kind[0]) put_error();
        fflush(stdout);
        release_all();
    }
    free(line);
    free(allocs);
    return 0;
}
