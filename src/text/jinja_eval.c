/* The Jinja evaluator: expressions, statements, scopes, macros and loops, with jinja2's rules:
 *   - each {% for %} iteration, macro call, {% with %} and block set runs in its own scope, so a
 *     {% set %} inside one does not leak out (namespace() attributes are the way to carry state);
 *     {% if %} makes no scope;
 *   - a macro sees the scope it was defined in (lexical), not its caller's loop variables;
 *   - undefined values print as "", iterate as empty, test false, and raise when an attribute,
 *     item or call is asked of them;
 *   - getattr tries the Python attribute (str/dict/list methods) before the dict key, getitem the
 *     key before the attribute (so d.items is the method even when d has a key "items").
 * Budgets (steps, depth, output bytes, memory) turn runaway templates into errors. */
#include "text/jinja.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---- */

static void fail_at(jctx *c, uint32_t off, const char *msg, size_t len)
{
    int line, col;
    if (off == 0)
        off = c->cur_off;
    jinja_line_col(c->t->src, c->t->src_len, off, &line, &col);
    if (c->err)
        cdx_err_set(c->err, CDX_ETEMPLATE, "template error at line %d col %d: %.*s", line, col,
                    (int)(len > 900 ? 900 : len), msg);
    longjmp(c->jb, 1);
}

void jfail(jctx *c, uint32_t off, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail_at(c, off, msg, strlen(msg));
    __builtin_unreachable();
}

void jfail_raw(jctx *c, uint32_t off, const char *msg, size_t len)
{
    fail_at(c, off, msg, len);
    __builtin_unreachable();
}

void jinja_step(jctx *c, uint32_t off, uint64_t n)
{
    c->steps += n;
    if (c->steps > c->max_steps)
        jfail(c, off, "the template ran more than %llu steps (an endless loop or recursion?)",
              (unsigned long long)c->max_steps);
}

static const char *fmt_hint(jctx *c, const char *fmt, ...) CDX_PRINTF(2, 3);
static const char *fmt_hint(jctx *c, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof tmp)
        n = sizeof tmp - 1;
    char *s = jalloc(c, (size_t)n + 1, 0);
    jcopy(s, tmp, (size_t)n);
    return s;
}

/* jinja2.utils.object_type_repr */
static const char *obj_type_repr(jval v)
{
    switch (v.t) {
    case JT_NONE: return "None";
    case JT_DICT: return v.d->ns ? "jinja2.utils.Namespace object" : "dict object";
    case JT_LOOP: return "jinja2.runtime.LoopContext object";
    case JT_FUNC: return v.fn->kind == JF_MACRO ? "jinja2.runtime.Macro object" : "builtin_function_or_method object";
    case JT_LIST: return v.l->tuple ? "tuple object" : "list object";
    case JT_STR: return "str object";
    case JT_INT: return "int object";
    case JT_FLOAT: return "float object";
    case JT_BOOL: return "bool object";
    case JT_VIEW:
        switch (v.vw->kind) {
        case VK_GEN: return "generator object";
        case VK_REVITER: return "list_reverseiterator object";
        case VK_ITEMS: return "dict_items object";
        case VK_KEYS: return "dict_keys object";
        case VK_VALUES: return "dict_values object";
        default: return "range object";
        }
    default: return "object";
    }
}

_Noreturn static void fail_undef(jctx *c, jval u, uint32_t off)
{
    jfail(c, off, "%s", u.hint ? u.hint : "undefined value");
}

static jval undef_attr(jctx *c, jval obj, const char *name)
{
    return jv_undef(fmt_hint(c, "'%s' has no attribute '%s'", obj_type_repr(obj), name));
}

/* ---- scopes ---- */

typedef struct jvar {
    const char *name;
    jval v;
} jvar;

struct jscope {
    jscope *parent;
    jvar *vars;
    size_t n, cap;
};

static jscope *scope_new(jctx *c, jscope *parent)
{
    jscope *s = jalloc(c, sizeof *s, 0);
    s->parent = parent;
    return s;
}

static void scope_set(jctx *c, jscope *s, const char *name, jval v)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->vars[i].name, name)) {
            s->vars[i].v = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        jvar *p = jalloc(c, cap * sizeof *p, 0);
        if (s->n)
            jcopy(p, s->vars, s->n * sizeof *p);
        s->vars = p;
        s->cap = cap;
    }
    s->vars[s->n].name = name;
    s->vars[s->n].v = v;
    s->n++;
}

static jval *scope_find(jscope *s, const char *name)
{
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->vars[i].name, name))
                return &s->vars[i].v;
    return NULL;
}

static jval lookup(jctx *c, jscope *s, const char *name)
{
    jval *p = scope_find(s, name);
    if (p)
        return *p;
    jval g;
    if (jinja_global(c, name, &g))
        return g;
    return jv_undef(fmt_hint(c, "'%s' is undefined", name));
}

/* ---- loop object ---- */

struct jloop {
    jlist *items;
    size_t i;
    int depth;           /* 1 for the outermost loop */
    const jnode *node;   /* for loop(...) in recursive loops */
    jscope *scope;
    bool changed_set;
    jval changed_last;
};

static jval loop_cycle(jctx *c, jfunc *self, jcall *a, uint32_t off)
{
    if (a->n_pos == 0)
        jfail(c, off, "no items for cycling given");
    jloop *L = self->self.loop;
    return a->pos[L->i % a->n_pos];
}

static jval loop_changed(jctx *c, jfunc *self, jcall *a, uint32_t off)
{
    jloop *L = self->self.loop;
    jval now = jv_list(c, a->n_pos, true);
    for (size_t i = 0; i < a->n_pos; i++)
        now.l->v[i] = a->pos[i];
    now.l->n = a->n_pos;
    if (L->changed_set && jv_eq(L->changed_last, now))
        return jv_bool(false);
    L->changed_set = true;
    L->changed_last = now;
    return jv_bool(true);
}

static jval loop_attr(jctx *c, jval obj, const char *name)
{
    jloop *L = obj.loop;
    size_t n = L->items->n, i = L->i;
    if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int((int64_t)n);
    if (!strcmp(name, "depth")) return jv_int(L->depth);
    if (!strcmp(name, "depth0")) return jv_int(L->depth - 1);
    if (!strcmp(name, "previtem"))
        return i > 0 ? L->items->v[i - 1] : jv_undef("there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? L->items->v[i + 1] : jv_undef("there is no next item");
    if (!strcmp(name, "cycle")) return jv_func(c, "cycle", loop_cycle, obj);
    if (!strcmp(name, "changed")) return jv_func(c, "changed", loop_changed, obj);
    return undef_attr(c, obj, name);
}

/* ---- attribute and item access ---- */

jval jinja_getattr(jctx *c, jval obj, const char *name, uint32_t off)
{
    jval m;
    switch (obj.t) {
    case JT_UNDEF:
        fail_undef(c, obj, off);
    case JT_LOOP:
        return loop_attr(c, obj, name);
    case JT_DICT:
        if (obj.d->ns) {
            jval *p = jd_get_s(obj.d, name);
            return p ? *p : undef_attr(c, obj, name);
        }
        if (jinja_method(c, obj, name, &m))
            return m;
        {
            jval *p = jd_get_s(obj.d, name);
            return p ? *p : undef_attr(c, obj, name);
        }
    default:
        if (jinja_method(c, obj, name, &m))
            return m;
        return undef_attr(c, obj, name);
    }
}

static bool as_index(jval k, int64_t *out)
{
    if (k.t == JT_INT) {
        *out = k.i;
        return true;
    }
    if (k.t == JT_BOOL) {
        *out = k.b;
        return true;
    }
    return false;
}

jval jinja_getitem(jctx *c, jval obj, jval key, uint32_t off)
{
    int64_t idx;
    switch (obj.t) {
    case JT_UNDEF:
        fail_undef(c, obj, off);
    case JT_DICT:
        if (!obj.d->ns) {
            jval *p = jd_get(obj.d, key);
            if (p)
                return *p;
        }
        break;
    case JT_LIST:
        if (as_index(key, &idx)) {
            int64_t n = (int64_t)obj.l->n;
            if (idx < 0)
                idx += n;
            if (idx >= 0 && idx < n)
                return obj.l->v[idx];
            return jv_undef(fmt_hint(c, "'%s' has no element %lld", obj_type_repr(obj), (long long)key.i));
        }
        break;
    case JT_VIEW:
        if (obj.vw->kind == VK_RANGE && as_index(key, &idx)) {
            int64_t n = (int64_t)obj.vw->items->n;
            if (idx < 0)
                idx += n;
            if (idx >= 0 && idx < n)
                return obj.vw->items->v[idx];
            return jv_undef("range object index out of range");
        }
        break;
    case JT_STR:
        if (as_index(key, &idx)) {
            int64_t n = (int64_t)jv_len(c, obj, off);
            if (idx < 0)
                idx += n;
            if (idx >= 0 && idx < n) {
                size_t b = utf8_cp_off(obj.s, (size_t)idx), e = b + 1;
                while (e < obj.s->len && ((unsigned char)obj.s->s[e] & 0xC0) == 0x80)
                    e++;
                jval r = jv_str(c, obj.s->s + b, e - b);
                r.s->markup = obj.s->markup;
                return r;
            }
            return jv_undef(fmt_hint(c, "'str object' has no element %lld", (long long)key.i));
        }
        break;
    default:
        break;
    }
    if (key.t == JT_STR)
        return jinja_getattr(c, obj, key.s->s, off);
    if (obj.t == JT_DICT) {
        jbuf b = {0};
        jv_write(c, &b, key, true, 0);
        return jv_undef(fmt_hint(c, "'%s' has no attribute %.*s", obj_type_repr(obj), (int)(b.n > 200 ? 200 : b.n), b.p ? b.p : ""));
    }
    return jv_undef(fmt_hint(c, "'%s' has no element", obj_type_repr(obj)));
}

static bool slice_arg(jval v, int64_t *out, bool *given)
{
    if (v.t == JT_NONE || v.t == JT_UNDEF) {
        *given = false;
        return true;
    }
    *given = true;
    return as_index(v, out);
}

/* Python's slice.indices + iteration: returns a new list/tuple/str. */
static jval do_slice(jctx *c, jval obj, jval vstart, jval vstop, jval vstep, uint32_t off)
{
    if (obj.t == JT_UNDEF)
        fail_undef(c, obj, off);
    if (obj.t != JT_LIST && obj.t != JT_STR)
        return jv_undef(fmt_hint(c, "'%s' is not subscriptable", obj_type_repr(obj)));
    int64_t start = 0, stop = 0, step = 1;
    bool gs, ge, gp;
    if (!slice_arg(vstart, &start, &gs) || !slice_arg(vstop, &stop, &ge) || !slice_arg(vstep, &step, &gp))
        return jv_undef("slice indices must be integers or None");
    if (!gp)
        step = 1;
    if (step == 0)
        jfail(c, off, "slice step cannot be zero");
    int64_t len = (int64_t)jv_len(c, obj, off);
    if (!gs) {
        start = step < 0 ? len - 1 : 0;
    } else {
        if (start < 0)
            start += len;
        if (start < 0)
            start = step < 0 ? -1 : 0;
        else if (start >= len)
            start = step < 0 ? len - 1 : len;
    }
    if (!ge) {
        stop = step < 0 ? -1 : len;
    } else {
        if (stop < 0)
            stop += len;
        if (stop < 0)
            stop = step < 0 ? -1 : 0;
        else if (stop >= len)
            stop = step < 0 ? len - 1 : len;
    }
    /* how many items: computed in 128 bits, so a huge step cannot overflow */
    __int128 count = 0;
    if (step > 0 && stop > start)
        count = ((__int128)stop - start + step - 1) / step;
    else if (step < 0 && stop < start)
        count = ((__int128)start - stop - step - 1) / -(__int128)step;
    if (obj.t == JT_LIST) {
        jval r = jv_list(c, (size_t)count, obj.l->tuple);
        for (__int128 k = 0; k < count; k++)
            r.l->v[r.l->n++] = obj.l->v[(int64_t)(start + k * step)];
        jinja_step(c, off, r.l->n);
        return r;
    }
    jbuf b = {0};
    if (obj.s->ascii) {
        for (__int128 k = 0; k < count; k++)
            jb_putc(c, &b, obj.s->s[(int64_t)(start + k * step)]);
    } else {
        /* offsets of every code point, then pick */
        size_t *offs = jalloc(c, ((size_t)len + 1) * sizeof *offs, off);
        size_t k = 0;
        for (size_t i = 0; i < obj.s->len; i++)
            if (((unsigned char)obj.s->s[i] & 0xC0) != 0x80)
                offs[k++] = i;
        offs[k] = obj.s->len;
        for (__int128 k = 0; k < count; k++) {
            int64_t i = (int64_t)(start + k * step);
            jb_put(c, &b, obj.s->s + offs[i], offs[i + 1] - offs[i]);
        }
    }
    jinja_step(c, off, b.n);
    return jv_strbuf(c, &b);
}

/* ---- arithmetic ---- */

static bool num_int(jval v, int64_t *out)
{
    if (v.t == JT_INT) {
        *out = v.i;
        return true;
    }
    if (v.t == JT_BOOL) {
        *out = v.b;
        return true;
    }
    return false;
}

_Noreturn static void bad_operands(jctx *c, const char *op, jval a, jval b, uint32_t off)
{
    if (a.t == JT_UNDEF)
        fail_undef(c, a, off);
    if (b.t == JT_UNDEF)
        fail_undef(c, b, off);
    jfail(c, off, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static jval repeat(jctx *c, jval seq, int64_t k, uint32_t off)
{
    if (k < 0)
        k = 0;
    if (seq.t == JT_STR) {
        size_t total;
        if (!cdx_mul_size(seq.s->len, (size_t)k, &total))
            jfail(c, off, "string repetition too large");
        jinja_step(c, off, total / 16);
        jbuf b = {0};
        for (int64_t i = 0; i < k; i++)
            jb_put(c, &b, seq.s->s, seq.s->len);
        jval r = jv_strbuf(c, &b);
        r.s->markup = seq.s->markup;
        return r;
    }
    size_t total;
    if (!cdx_mul_size(seq.l->n, (size_t)k, &total))
        jfail(c, off, "list repetition too large");
    jinja_step(c, off, total);
    jval r = jv_list(c, total, seq.l->tuple);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.l->n; j++)
            r.l->v[r.l->n++] = seq.l->v[j];
    return r;
}

static int64_t floordiv_i(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static int64_t mod_i(int64_t a, int64_t b)
{
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

static double mod_f(double a, double b)
{
    double r = fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    else if (r == 0)
        r = copysign(0.0, b);
    return r;
}

jval jinja_str_format(jctx *c, jval fmt, jval args, uint32_t off);

static jval binop(jctx *c, int op, jval a, jval b, uint32_t off)
{
    int64_t x = 0, y = 0, r;
    bool ints = num_int(a, &x) && num_int(b, &y);
    bool nums = jv_is_num(a) && jv_is_num(b);
    switch (op) {
    case OP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &r))
                jfail(c, off, "integer overflow in + (caldrix integers are 64-bit)");
            return jv_int(r);
        }
        if (nums)
            return jv_float(jv_as_double(a) + jv_as_double(b));
        if (a.t == JT_STR && b.t == JT_STR) {
            /* Markup + str escapes the str (markupsafe's __add__ / __radd__) */
            bool markup = a.s->markup || b.s->markup;
            if (markup) {
                a = jinja_escape(c, a);
                b = jinja_escape(c, b);
            }
            jbuf buf = {0};
            jb_need(c, &buf, a.s->len + b.s->len);
            jb_put(c, &buf, a.s->s, a.s->len);
            jb_put(c, &buf, b.s->s, b.s->len);
            jval r = jv_strbuf(c, &buf);
            r.s->markup = markup;
            return r;
        }
        if (a.t == JT_LIST && b.t == JT_LIST && a.l->tuple == b.l->tuple) {
            jval l = jv_list(c, a.l->n + b.l->n, a.l->tuple);
            jcopy(l.l->v, a.l->v, a.l->n * sizeof(jval));
            if (b.l->n)
                jcopy(l.l->v + a.l->n, b.l->v, b.l->n * sizeof(jval));
            l.l->n = a.l->n + b.l->n;
            jinja_step(c, off, l.l->n);
            return l;
        }
        if (a.t == JT_STR && b.t != JT_UNDEF)
            jfail(c, off, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
        bad_operands(c, "+", a, b, off);
    case OP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &r))
                jfail(c, off, "integer overflow in - (caldrix integers are 64-bit)");
            return jv_int(r);
        }
        if (nums)
            return jv_float(jv_as_double(a) - jv_as_double(b));
        bad_operands(c, "-", a, b, off);
    case OP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &r))
                jfail(c, off, "integer overflow in * (caldrix integers are 64-bit)");
            return jv_int(r);
        }
        if (nums)
            return jv_float(jv_as_double(a) * jv_as_double(b));
        if ((a.t == JT_STR || a.t == JT_LIST) && num_int(b, &y))
            return repeat(c, a, y, off);
        if ((b.t == JT_STR || b.t == JT_LIST) && num_int(a, &x))
            return repeat(c, b, x, off);
        bad_operands(c, "*", a, b, off);
    case OP_DIV:
        if (nums) {
            if (jv_as_double(b) == 0)
                jfail(c, off, "division by zero");
            return jv_float(jv_as_double(a) / jv_as_double(b));
        }
        bad_operands(c, "/", a, b, off);
    case OP_FLOORDIV:
        if (ints) {
            if (y == 0)
                jfail(c, off, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1)
                jfail(c, off, "integer overflow in //");
            return jv_int(floordiv_i(x, y));
        }
        if (nums) {
            double d = jv_as_double(b);
            if (d == 0)
                jfail(c, off, "float floor division by zero");
            return jv_float(floor(jv_as_double(a) / d));
        }
        bad_operands(c, "//", a, b, off);
    case OP_MOD:
        if (ints) {
            if (y == 0)
                jfail(c, off, "integer division or modulo by zero");
            if (y == -1)
                return jv_int(0);
            return jv_int(mod_i(x, y));
        }
        if (nums) {
            double d = jv_as_double(b);
            if (d == 0)
                jfail(c, off, "float modulo");
            return jv_float(mod_f(jv_as_double(a), d));
        }
        if (a.t == JT_STR)
            return jinja_str_format(c, a, b, off);
        bad_operands(c, "%", a, b, off);
    case OP_POW:
        if (ints && y >= 0) {
            int64_t acc = 1, base = x;
            int64_t e = y;
            while (e > 0) {
                if (e & 1)
                    if (__builtin_mul_overflow(acc, base, &acc))
                        jfail(c, off, "integer overflow in ** (caldrix integers are 64-bit)");
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base))
                    jfail(c, off, "integer overflow in ** (caldrix integers are 64-bit)");
            }
            return jv_int(acc);
        }
        if (nums) {
            double p = pow(jv_as_double(a), jv_as_double(b));
            if (jv_as_double(a) == 0 && jv_as_double(b) < 0)
                jfail(c, off, "0.0 cannot be raised to a negative power");
            return jv_float(p);
        }
        bad_operands(c, "**", a, b, off);
    case OP_CONCAT: {
        jbuf buf = {0};
        jv_write(c, &buf, a, false, 0);
        jv_write(c, &buf, b, false, 0);
        return jv_strbuf(c, &buf);
    }
    }
    jfail(c, off, "unknown operator");
}

bool jinja_contains(jctx *c, jval container, jval item, uint32_t off)
{
    switch (container.t) {
    case JT_UNDEF:
        return false;
    case JT_STR:
        if (item.t != JT_STR)
            jfail(c, off, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (item.s->len == 0)
            return true;
        return memmem(container.s->s, container.s->len, item.s->s, item.s->len) != NULL;
    case JT_LIST:
        jinja_step(c, off, container.l->n / 4);
        for (size_t i = 0; i < container.l->n; i++)
            if (jv_eq(container.l->v[i], item))
                return true;
        return false;
    case JT_DICT:
        if (container.d->ns)
            break;
        return jd_get(container.d, item) != NULL;
    case JT_VIEW: {
        jview *w = container.vw;
        bool consume = w->kind == VK_GEN || w->kind == VK_REVITER;
        for (size_t i = consume ? w->pos : 0; i < w->items->n; i++)
            if (jv_eq(w->items->v[i], item)) {
                if (consume)
                    w->pos = i + 1; /* a generator is consumed up to the match */
                return true;
            }
        if (consume)
            w->pos = w->items->n;
        return false;
    }
    default:
        break;
    }
    jfail(c, off, "argument of type '%s' is not iterable", jv_type_name(container));
}

/* ---- expressions ---- */

static jval eval(jctx *c, jscope *s, const jnode *n);
static int exec_body(jctx *c, jscope *s, const jnode *body);

static void enter(jctx *c, uint32_t off)
{
    if (++c->depth > c->max_depth)
        jfail(c, off, "the template nests deeper than %d levels (endless recursion?)", c->max_depth);
}

static void eval_args(jctx *c, jscope *s, const jargs *a, jcall *out, uint32_t off)
{
    size_t n_pos = a->n_pos, n_kw = a->n_kw;
    jval star = { .t = JT_UNDEF }, dstar = { .t = JT_UNDEF };
    jlist *sl = NULL;
    if (a->star) {
        star = eval(c, s, a->star);
        sl = jv_iter_list(c, star, off);
        n_pos += sl->n;
    }
    if (a->dstar) {
        dstar = eval(c, s, a->dstar);
        if (dstar.t != JT_DICT || dstar.d->ns)
            jfail(c, off, "argument after ** must be a mapping, not %s", jv_type_name(dstar));
        n_kw += dstar.d->n;
    }
    out->pos = n_pos ? jalloc(c, n_pos * sizeof(jval), off) : NULL;
    out->kw = n_kw ? jalloc(c, n_kw * sizeof(char *), off) : NULL;
    out->kwv = n_kw ? jalloc(c, n_kw * sizeof(jval), off) : NULL;
    out->n_pos = 0;
    out->n_kw = 0;
    for (size_t i = 0; i < a->n_pos; i++)
        out->pos[out->n_pos++] = eval(c, s, a->pos[i]);
    if (sl)
        for (size_t i = 0; i < sl->n; i++)
            out->pos[out->n_pos++] = sl->v[i];
    for (size_t i = 0; i < a->n_kw; i++) {
        out->kw[out->n_kw] = a->kw[i];
        out->kwv[out->n_kw++] = eval(c, s, a->kwv[i]);
    }
    if (a->dstar)
        for (size_t i = 0; i < dstar.d->n; i++) {
            if (dstar.d->k[i].t != JT_STR)
                jfail(c, off, "keywords must be strings");
            out->kw[out->n_kw] = dstar.d->k[i].s->s;
            out->kwv[out->n_kw++] = dstar.d->v[i];
        }
}

static jval apply_filter(jctx *c, jscope *s, const jnode *f, jval v)
{
    const jfilter_row *row = f->impl;
    if (!row)
        jfail(c, f->off, "No filter named '%s'.", f->name);
    jcall a;
    eval_args(c, s, &f->args, &a, f->off);
    return row->fn(c, v, &a, f->off);
}

static jval eval_compare(jctx *c, jscope *s, const jnode *n)
{
    jval l = eval(c, s, n->a);
    for (size_t i = 0; i < n->n; i++) {
        jval r = eval(c, s, n->kids[i]);
        bool ok;
        switch (n->ops[i]) {
        case OP_EQ: ok = jv_eq(l, r); break;
        case OP_NE: ok = !jv_eq(l, r); break;
        case OP_IN: ok = jinja_contains(c, r, l, n->off); break;
        case OP_NOTIN: ok = !jinja_contains(c, r, l, n->off); break;
        default: {
            if (l.t == JT_UNDEF)
                fail_undef(c, l, n->off);
            if (r.t == JT_UNDEF)
                fail_undef(c, r, n->off);
            bool orderable = (jv_is_num(l) && jv_is_num(r)) || (l.t == JT_STR && r.t == JT_STR) ||
                             (l.t == JT_LIST && r.t == JT_LIST && l.l->tuple == r.l->tuple);
            if (!orderable) {
                static const char *const sym[] = { [OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">", [OP_GE] = ">=" };
                jfail(c, n->off, "'%s' not supported between instances of '%s' and '%s'", sym[n->ops[i]],
                      jv_type_name(l), jv_type_name(r));
            }
            int k = jv_cmp(c, l, r, n->off);
            bool nan = (l.t == JT_FLOAT && isnan(l.f)) || (r.t == JT_FLOAT && isnan(r.f));
            switch (n->ops[i]) {
            case OP_LT: ok = !nan && k < 0; break;
            case OP_LE: ok = !nan && k <= 0; break;
            case OP_GT: ok = !nan && k > 0; break;
            default: ok = !nan && k >= 0; break;
            }
        }
        }
        if (!ok)
            return jv_bool(false);
        l = r;
    }
    return jv_bool(true);
}

static jval eval(jctx *c, jscope *s, const jnode *n)
{
    jinja_step(c, n->off, 1);
    enter(c, n->off);
    uint32_t saved_off = c->cur_off;
    c->cur_off = n->off;
    jval r;
    switch (n->kind) {
    case N_CONST:
        r = n->v;
        break;
    case N_NAME:
        r = lookup(c, s, n->name);
        break;
    case N_LIST:
    case N_TUPLE:
        r = jv_list(c, n->n, n->kind == N_TUPLE);
        for (size_t i = 0; i < n->n; i++)
            r.l->v[i] = eval(c, s, n->kids[i]);
        r.l->n = n->n;
        break;
    case N_DICT:
        r = jv_dict(c, n->n);
        for (size_t i = 0; i < n->n; i++) {
            jval k = eval(c, s, n->kids[i]);
            if (k.t == JT_LIST && !k.l->tuple)
                jfail(c, n->kids[i]->off, "unhashable type: 'list'");
            if (k.t == JT_DICT)
                jfail(c, n->kids[i]->off, "unhashable type: 'dict'");
            jd_set(c, r.d, k, eval(c, s, n->kids2[i]));
        }
        break;
    case N_GETATTR:
        r = jinja_getattr(c, eval(c, s, n->a), n->name, n->off);
        break;
    case N_GETITEM: {
        jval obj = eval(c, s, n->a);
        if (n->b->kind == N_SLICE) {
            const jnode *sl = n->b;
            jval a = sl->a ? eval(c, s, sl->a) : jv_none();
            jval b = sl->b ? eval(c, s, sl->b) : jv_none();
            jval st = sl->c ? eval(c, s, sl->c) : jv_none();
            r = do_slice(c, obj, a, b, st, n->off);
        } else {
            r = jinja_getitem(c, obj, eval(c, s, n->b), n->off);
        }
        break;
    }
    case N_SLICE:
        jfail(c, n->off, "a slice outside of []");
    case N_CALL: {
        jval fn = eval(c, s, n->a);
        jcall a;
        eval_args(c, s, &n->args, &a, n->off);
        r = jinja_call(c, fn, &a, n->off);
        break;
    }
    case N_FILTER:
        r = apply_filter(c, s, n, n->a ? eval(c, s, n->a) : jv_undef(NULL));
        break;
    case N_TEST: {
        const jtest_row *row = n->impl;
        if (!row)
            jfail(c, n->off, "No test named '%s'.", n->name);
        jval v = eval(c, s, n->a);
        jcall a;
        eval_args(c, s, &n->args, &a, n->off);
        r = jv_bool(row->fn(c, v, &a, n->off));
        break;
    }
    case N_BINOP: {
        jval a = eval(c, s, n->a);
        jval b = eval(c, s, n->b);
        r = binop(c, n->op, a, b, n->off);
        break;
    }
    case N_NEG:
    case N_POS: {
        jval a = eval(c, s, n->a);
        if (a.t == JT_UNDEF)
            fail_undef(c, a, n->off);
        if (!jv_is_num(a))
            jfail(c, n->off, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', jv_type_name(a));
        if (a.t == JT_FLOAT)
            r = jv_float(n->kind == N_NEG ? -a.f : a.f);
        else {
            int64_t x = a.t == JT_BOOL ? a.b : a.i;
            if (n->kind == N_NEG && x == INT64_MIN)
                jfail(c, n->off, "integer overflow in unary -");
            r = jv_int(n->kind == N_NEG ? -x : x);
        }
        break;
    }
    case N_NOT:
        r = jv_bool(!jv_truthy(eval(c, s, n->a)));
        break;
    case N_AND:
        r = eval(c, s, n->a);
        if (jv_truthy(r))
            r = eval(c, s, n->b);
        break;
    case N_OR:
        r = eval(c, s, n->a);
        if (!jv_truthy(r))
            r = eval(c, s, n->b);
        break;
    case N_COMPARE:
        r = eval_compare(c, s, n);
        break;
    case N_COND:
        if (jv_truthy(eval(c, s, n->a)))
            r = eval(c, s, n->b);
        else if (n->c)
            r = eval(c, s, n->c);
        else
            r = jv_undef("the inline if-expression evaluated to false and no else section was defined.");
        break;
    default:
        jfail(c, n->off, "internal error: node %d is not an expression", n->kind);
    }
    c->cur_off = saved_off;
    c->depth--;
    return r;
}

/* ---- calls ---- */

static jval call_macro(jctx *c, jfunc *f, jcall *a, uint32_t off)
{
    const jnode *m = f->macro;
    const char *mname = m->name ? m->name : "caller";
    jscope *ms = scope_new(c, f->closure);
    bool *taken = a->n_kw ? jalloc(c, a->n_kw, off) : NULL;
    if (a->n_pos > m->n && !(m->flags & MF_VARARGS))
        jfail(c, off, "macro '%s' takes not more than %zu argument(s)", mname, m->n);
    for (size_t i = 0; i < m->n; i++) {
        const char *pname = m->kids[i]->name;
        jval v = { .t = JT_UNDEF };
        bool have = false;
        if (i < a->n_pos) {
            v = a->pos[i];
            have = true;
        }
        for (size_t k = 0; k < a->n_kw; k++)
            if (!strcmp(a->kw[k], pname)) {
                if (have)
                    jfail(c, off, "macro '%s' got multiple values for argument '%s'", mname, pname);
                v = a->kwv[k];
                taken[k] = true;
                have = true;
            }
        if (!have) {
            if (m->kids2[i])
                v = eval(c, ms, m->kids2[i]);
            else
                v = jv_undef(fmt_hint(c, "parameter '%s' was not provided", pname));
        }
        scope_set(c, ms, pname, v);
    }
    jval kwargs = jv_dict(c, 0);
    jval caller = jv_undef("'caller' is undefined");
    for (size_t k = 0; k < a->n_kw; k++) {
        if (taken && taken[k])
            continue;
        if (!strcmp(a->kw[k], "caller") && (m->flags & MF_CALLER)) {
            caller = a->kwv[k];
            continue;
        }
        if (!(m->flags & MF_KWARGS))
            jfail(c, off, "macro '%s' takes no keyword argument '%s'", mname, a->kw[k]);
        jd_set(c, kwargs.d, jv_cstr(c, a->kw[k]), a->kwv[k]);
    }
    if (m->flags & MF_VARARGS) {
        jval va = jv_list(c, 0, true);
        for (size_t i = m->n; i < a->n_pos; i++)
            jl_push(c, va.l, a->pos[i]);
        scope_set(c, ms, "varargs", va);
    }
    if (m->flags & MF_KWARGS)
        scope_set(c, ms, "kwargs", kwargs);
    if (m->flags & MF_CALLER)
        scope_set(c, ms, "caller", caller);

    jbuf buf = {0}, *saved = c->out;
    c->out = &buf;
    exec_body(c, ms, m->body);
    c->out = saved;
    return jv_strbuf(c, &buf);
}

static void run_for(jctx *c, jscope *s, const jnode *n, jval iterable, int depth);

jval jinja_call(jctx *c, jval fn, jcall *a, uint32_t off)
{
    enter(c, off);
    jval r;
    if (fn.t == JT_FUNC) {
        if (fn.fn->kind == JF_MACRO) {
            r = call_macro(c, fn.fn, a, off);
        } else {
            r = fn.fn->fn(c, fn.fn, a, off);
            /* markupsafe wraps these str methods so that a Markup stays a Markup */
            static const char *const keep[] = { "capitalize", "title", "lower", "upper", "replace", "ljust", "rjust",
                                                "lstrip", "rstrip", "center", "strip", NULL };
            if (fn.fn->self.t == JT_STR && fn.fn->self.s->markup && r.t == JT_STR)
                for (int i = 0; keep[i]; i++)
                    if (!strcmp(fn.fn->name, keep[i])) {
                        r = jinja_markup(c, r);
                        break;
                    }
        }
    } else if (fn.t == JT_LOOP && fn.loop->node && (fn.loop->node->flags & FF_RECURSIVE)) {
        if (a->n_pos != 1 || a->n_kw)
            jfail(c, off, "loop() takes exactly one argument");
        jbuf buf = {0}, *saved = c->out;
        c->out = &buf;
        run_for(c, fn.loop->scope, fn.loop->node, a->pos[0], fn.loop->depth + 1);
        c->out = saved;
        r = jv_strbuf(c, &buf);
    } else if (fn.t == JT_UNDEF) {
        fail_undef(c, fn, off);
    } else {
        jfail(c, off, "'%s' object is not callable", jv_type_name(fn));
    }
    c->depth--;
    return r;
}

/* ---- statements ---- */

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

static void assign(jctx *c, jscope *s, const jnode *target, jval v, uint32_t off)
{
    if (target->kind == N_NAME) {
        scope_set(c, s, target->name, v);
        return;
    }
    if (target->kind == N_TUPLE) {
        jlist *l = jv_iter_list(c, v, off);
        if (l->n != target->n)
            jfail(c, off, l->n < target->n ? "not enough values to unpack (expected %zu, got %zu)"
                                           : "too many values to unpack (expected %zu, got %zu)",
                  target->n, l->n);
        for (size_t i = 0; i < target->n; i++)
            assign(c, s, target->kids[i], l->v[i], off);
        return;
    }
    if (target->kind == N_NSREF) {
        jval ns = lookup(c, s, target->a->name);
        if (ns.t != JT_DICT || !ns.d->ns)
            jfail(c, off, "cannot assign attribute on non-namespace object");
        jd_set(c, ns.d, jv_cstr(c, target->name), v);
        return;
    }
    jfail(c, off, "can't assign to this target");
}

static void run_for(jctx *c, jscope *s, const jnode *n, jval iterable, int depth)
{
    jlist *items = jv_iter_list(c, iterable, n->off);
    if (n->c) {
        /* for x in y if cond: filter first, so loop.length and loop.last count what is kept */
        jval kept = jv_list(c, 0, false);
        for (size_t i = 0; i < items->n; i++) {
            jinja_step(c, n->off, 1);
            jscope *it = scope_new(c, s);
            assign(c, it, n->a, items->v[i], n->off);
            if (jv_truthy(eval(c, it, n->c)))
                jl_push(c, kept.l, items->v[i]);
        }
        items = kept.l;
    }
    if (items->n == 0) {
        if (n->else_body)
            exec_body(c, scope_new(c, s), n->else_body);
        return;
    }
    jloop *L = jalloc(c, sizeof *L, n->off);
    L->items = items;
    L->depth = depth;
    L->node = n;
    L->scope = s;
    jval lv = { .t = JT_LOOP };
    lv.loop = L;
    for (size_t i = 0; i < items->n; i++) {
        jinja_step(c, n->off, 1);
        L->i = i;
        jscope *it = scope_new(c, s);
        scope_set(c, it, "loop", lv);
        assign(c, it, n->a, items->v[i], n->off);
        int flow = exec_body(c, it, n->body);
        if (flow == FLOW_BREAK)
            break;
    }
}

static jval capture(jctx *c, jscope *s, const jnode *body)
{
    jbuf buf = {0}, *saved = c->out;
    c->out = &buf;
    exec_body(c, s, body);
    c->out = saved;
    return jv_strbuf(c, &buf);
}

static jval apply_filter_chain(jctx *c, jscope *s, const jnode *f, jval v)
{
    if (!f)
        return v;
    if (f->kind != N_FILTER)
        return v;
    v = apply_filter_chain(c, s, f->a, v);
    return apply_filter(c, s, f, v);
}

static int exec_stmt(jctx *c, jscope *s, const jnode *n)
{
    jinja_step(c, n->off, 1);
    c->cur_off = n->off;
    switch (n->kind) {
    case N_DATA:
        jb_put(c, c->out, n->v.s->s, n->v.s->len);
        return FLOW_NORMAL;
    case N_PRINT: {
        jval v = eval(c, s, n->a);
        jv_write(c, c->out, v, false, 0);
        return FLOW_NORMAL;
    }
    case N_IF:
        if (jv_truthy(eval(c, s, n->a)))
            return exec_body(c, s, n->body);
        if (n->else_body)
            return exec_body(c, s, n->else_body);
        return FLOW_NORMAL;
    case N_FOR:
        run_for(c, s, n, eval(c, s, n->b), 1);
        return FLOW_NORMAL;
    case N_SET:
        assign(c, s, n->a, eval(c, s, n->b), n->off);
        return FLOW_NORMAL;
    case N_SETBLOCK: {
        jval v = capture(c, scope_new(c, s), n->body);
        v = apply_filter_chain(c, s, n->c, v);
        assign(c, s, n->a, v, n->off);
        return FLOW_NORMAL;
    }
    case N_MACRO: {
        jfunc *f = jalloc(c, sizeof *f, n->off);
        f->kind = JF_MACRO;
        f->name = n->name;
        f->macro = n;
        f->closure = s;
        jval v = { .t = JT_FUNC };
        v.fn = f;
        scope_set(c, s, n->name, v);
        return FLOW_NORMAL;
    }
    case N_CALLBLOCK: {
        const jnode *call = n->a;
        jfunc *caller = jalloc(c, sizeof *caller, n->off);
        caller->kind = JF_MACRO;
        caller->name = "caller";
        caller->macro = n->b;
        caller->closure = s;
        jval cv = { .t = JT_FUNC };
        cv.fn = caller;
        jval fn = eval(c, s, call->a);
        jcall a;
        eval_args(c, s, &call->args, &a, call->off);
        const char **kw = jalloc(c, (a.n_kw + 1) * sizeof *kw, n->off);
        jval *kwv = jalloc(c, (a.n_kw + 1) * sizeof *kwv, n->off);
        if (a.n_kw) {
            jcopy(kw, a.kw, a.n_kw * sizeof *kw);
            jcopy(kwv, a.kwv, a.n_kw * sizeof *kwv);
        }
        kw[a.n_kw] = "caller";
        kwv[a.n_kw] = cv;
        a.kw = kw;
        a.kwv = kwv;
        a.n_kw++;
        jval r = jinja_call(c, fn, &a, call->off);
        jv_write(c, c->out, r, false, 0);
        return FLOW_NORMAL;
    }
    case N_FILTERBLOCK: {
        jval v = capture(c, scope_new(c, s), n->body);
        v = apply_filter_chain(c, s, n->c, v);
        jv_write(c, c->out, v, false, 0);
        return FLOW_NORMAL;
    }
    case N_WITH: {
        jscope *w = scope_new(c, s);
        for (size_t i = 0; i < n->n; i++)
            assign(c, w, n->kids[i], eval(c, s, n->kids2[i]), n->off);
        exec_body(c, w, n->body);
        return FLOW_NORMAL;
    }
    case N_SCOPE:
        exec_body(c, scope_new(c, s), n->body);
        return FLOW_NORMAL;
    case N_BREAK:
        return FLOW_BREAK;
    case N_CONTINUE:
        return FLOW_CONTINUE;
    case N_BODY:
        return exec_body(c, s, n);
    default:
        jfail(c, n->off, "internal error: node %d is not a statement", n->kind);
    }
}

static int exec_body(jctx *c, jscope *s, const jnode *body)
{
    enter(c, body->off);
    int flow = FLOW_NORMAL;
    for (size_t i = 0; i < body->n && flow == FLOW_NORMAL; i++)
        flow = exec_stmt(c, s, body->kids[i]);
    c->depth--;
    return flow;
}

/* ---- entry ---- */

int jinja_render(const jtemplate *t, const json_t *vars, const cdx_tmpl_opts *opts, char **out, size_t *out_len,
                 cdx_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (vars && !json_is_object(vars))
        return cdx_err_set(err, CDX_EINVAL, "template variables must be a JSON object");
    jctx *c = calloc(1, sizeof *c);
    if (!c)
        return cdx_err_set(err, CDX_ENOMEM, "template: out of memory");
    c->t = t;
    c->err = err;
    c->max_output_bytes = opts && opts->max_output_bytes ? opts->max_output_bytes : (size_t)64 << 20;
    c->arena.cap_bytes = opts && opts->max_memory_bytes ? opts->max_memory_bytes : (size_t)512 << 20;
    c->max_steps = opts && opts->max_steps ? opts->max_steps : 50000000ull;
    c->max_depth = opts && opts->max_depth ? opts->max_depth : 1000;
    c->now_s = opts && opts->now_s ? opts->now_s : -1;
    ja_take_spares(&c->arena, t->cache);
    int rc = 0;
    if (setjmp(c->jb)) {
        rc = err && err->code ? err->code : CDX_ETEMPLATE;
        goto done;
    }
    jscope *root = scope_new(c, NULL);
    if (vars) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars, key, val) {
            size_t kl = strlen(key);
            char *k = jalloc(c, kl + 1, 0);
            jcopy(k, key, kl);
            scope_set(c, root, k, jv_from_json(c, val, 0));
        }
    }
    jscope *top = scope_new(c, root);
    jbuf buf = {0};
    c->out = &buf;
    exec_body(c, top, t->root);
    char *res = malloc(buf.n + 1);
    if (!res) {
        rc = cdx_err_set(err, CDX_ENOMEM, "template: out of memory for the output (%zu bytes)", buf.n);
        goto done;
    }
    if (buf.n)
        jcopy(res, buf.p, buf.n);
    res[buf.n] = 0;
    *out = res;
    if (out_len)
        *out_len = buf.n;
done:
    ja_release(&c->arena, t->cache);
    free(c);
    return rc;
}
