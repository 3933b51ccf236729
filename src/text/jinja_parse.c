/* The Jinja parser: tokens to a syntax tree, after jinja2/parser.py (3.1). The grammar, loosest
 * binding first:
 *   tuple      expr ("," expr)*
 *   expr       or ("if" or ("else" expr)?)*
 *   or / and / not / compare (==, !=, <, <=, >, >=, in, not in; chained)
 *   math1 (+ -) / concat (~) / math2 (* / // %) / pow (**, left-associative as in jinja)
 *   unary      ("-" | "+") unary | primary postfix ; then filters "|f(...)", tests "is [not] t ...", calls
 *   postfix    ".name", ".0", "[sub]", "(args)"
 * Filters and tests are looked up here, so an unknown one is a syntax error with its position,
 * except inside an {% if %} or a conditional expression, where jinja 3 reports it when reached. */
#include "text/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARSE_DEPTH 400

typedef struct parser {
    jtemplate *t;
    jtoken *tk;
    size_t n, i;
    cdx_err *err;
    jmp_buf jb;
    int depth;
    int loop_depth;
    int *macro_flags;
} parser;

void jinja_line_col(const char *src, size_t src_len, uint32_t off, int *line, int *col)
{
    int l = 1, c = 1;
    if (off > src_len)
        off = (uint32_t)src_len;
    for (size_t i = 0; i < off; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

_Noreturn static void pfail(parser *P, uint32_t off, const char *fmt, ...) CDX_PRINTF(3, 4);
static void pfail(parser *P, uint32_t off, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    jinja_line_col(P->t->src, P->t->src_len, off, &line, &col);
    cdx_err_set(P->err, CDX_ETEMPLATE, "template syntax error at line %d col %d: %s", line, col, msg);
    longjmp(P->jb, 1);
}

static void *palloc(parser *P, size_t n)
{
    void *p = ja_alloc(&P->t->arena, n);
    if (!p) {
        cdx_err_set(P->err, CDX_ENOMEM, "template: out of memory while parsing");
        longjmp(P->jb, 1);
    }
    return p;
}

static jtoken *cur(parser *P) { return &P->tk[P->i]; }
static jtoken *peek(parser *P) { return &P->tk[P->i + 1 < P->n ? P->i + 1 : P->n - 1]; }
static void next(parser *P)
{
    if (P->i + 1 < P->n)
        P->i++;
}

static bool tok_is(const jtoken *t, int type, const char *text)
{
    if (t->type != type)
        return false;
    size_t n = strlen(text);
    return t->len == n && memcmp(t->s, text, n) == 0;
}
static bool is_name(parser *P, const char *s) { return tok_is(cur(P), TK_NAME, s); }
static bool is_op(parser *P, const char *s) { return tok_is(cur(P), TK_OP, s); }

static const char *describe(const jtoken *t, char *buf, size_t cap)
{
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_BLOCK_END: return "end of statement block";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "begin of statement block";
    case TK_VAR_BEGIN: return "begin of print statement";
    case TK_DATA: return "template data";
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default:
        snprintf(buf, cap, "%.*s", (int)(t->len > 40 ? 40 : t->len), t->s);
        return buf;
    }
}

_Noreturn static void unexpected(parser *P, const char *want)
{
    char b[64];
    pfail(P, cur(P)->off, "expected %s, got '%s'", want, describe(cur(P), b, sizeof b));
}

static void expect_op(parser *P, const char *op)
{
    if (!is_op(P, op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(P, w);
    }
    next(P);
}

static const char *expect_name(parser *P)
{
    if (cur(P)->type != TK_NAME)
        unexpected(P, "a name");
    char *s = palloc(P, cur(P)->len + 1);
    jcopy(s, cur(P)->s, cur(P)->len);
    next(P);
    return s;
}

static void expect_block_end(parser *P)
{
    if (cur(P)->type != TK_BLOCK_END)
        unexpected(P, "end of statement block");
    next(P);
}

static jnode *node(parser *P, int kind, uint32_t off)
{
    jnode *n = palloc(P, sizeof *n);
    n->kind = (uint16_t)kind;
    n->off = off;
    return n;
}

/* A growable array of node pointers in the arena. */
typedef struct nvec {
    jnode **v;
    size_t n, cap;
} nvec;

static void nv_push(parser *P, nvec *a, jnode *x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        jnode **p = palloc(P, cap * sizeof *p);
        if (a->n)
            jcopy(p, a->v, a->n * sizeof *p);
        a->v = p;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}

static void enter(parser *P)
{
    if (++P->depth > MAX_PARSE_DEPTH)
        pfail(P, cur(P)->off, "template nested too deeply (more than %d levels)", MAX_PARSE_DEPTH);
}
static void leave(parser *P) { P->depth--; }

/* ---- expressions ---- */

static jnode *parse_expression(parser *P, bool with_condexpr);
static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);
static jnode *parse_filter_expr(parser *P, jnode *n);

static void parse_call_args(parser *P, jargs *a)
{
    uint32_t off = cur(P)->off;
    expect_op(P, "(");
    nvec pos = {0}, kwv = {0};
    const char **kw = NULL;
    size_t kw_cap = 0;
    bool require_comma = false;
    while (!is_op(P, ")")) {
        if (require_comma) {
            expect_op(P, ",");
            if (is_op(P, ")"))
                break;
        }
        if (is_op(P, "*")) {
            if (a->star || a->dstar)
                pfail(P, off, "invalid syntax for function call expression");
            next(P);
            a->star = parse_expression(P, true);
        } else if (is_op(P, "**")) {
            if (a->dstar)
                pfail(P, off, "invalid syntax for function call expression");
            next(P);
            a->dstar = parse_expression(P, true);
        } else if (cur(P)->type == TK_NAME && tok_is(peek(P), TK_OP, "=")) {
            if (a->dstar)
                pfail(P, off, "invalid syntax for function call expression");
            const char *key = expect_name(P);
            next(P);
            if (kwv.n == kw_cap) {
                kw_cap = kw_cap ? kw_cap * 2 : 4;
                const char **p = palloc(P, kw_cap * sizeof *p);
                if (kwv.n)
                    jcopy(p, kw, kwv.n * sizeof *p);
                kw = p;
            }
            kw[kwv.n] = key;
            nv_push(P, &kwv, parse_expression(P, true));
        } else {
            if (a->star || a->dstar || kwv.n)
                pfail(P, off, "invalid syntax for function call expression");
            nv_push(P, &pos, parse_expression(P, true));
        }
        require_comma = true;
    }
    expect_op(P, ")");
    a->pos = pos.v;
    a->n_pos = pos.n;
    a->kw = kw;
    a->kwv = kwv.v;
    a->n_kw = kwv.n;
}

static const char *parse_dotted_name(parser *P)
{
    const char *name = expect_name(P);
    while (is_op(P, ".")) {
        next(P);
        const char *part = expect_name(P);
        size_t a = strlen(name), b = strlen(part);
        char *s = palloc(P, a + b + 2);
        jcopy(s, name, a);
        s[a] = '.';
        jcopy(s + a + 1, part, b + 1);
        name = s;
    }
    return name;
}

static jnode *parse_filter(parser *P, jnode *in, bool start_inline)
{
    while (is_op(P, "|") || start_inline) {
        if (!start_inline)
            next(P);
        uint32_t off = cur(P)->off;
        const char *name = parse_dotted_name(P);
        jnode *f = node(P, N_FILTER, off);
        f->a = in;
        f->name = name;
        f->impl = jinja_find_filter(name); /* NULL: check_names decides */
        if (is_op(P, "("))
            parse_call_args(P, &f->args);
        in = f;
        start_inline = false;
    }
    return in;
}

static jnode *parse_test(parser *P, jnode *in)
{
    uint32_t off = cur(P)->off;
    next(P); /* is */
    bool negated = false;
    if (is_name(P, "not")) {
        next(P);
        negated = true;
    }
    uint32_t name_off = cur(P)->off;
    const char *name = parse_dotted_name(P);
    jnode *t = node(P, N_TEST, off);
    t->a = in;
    t->name = name;
    t->impl = jinja_find_test(name); /* NULL: check_names decides */
    t->off = name_off;
    jtoken *c = cur(P);
    if (is_op(P, "(")) {
        parse_call_args(P, &t->args);
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT || c->type == TK_FLOAT ||
                is_op(P, "[") || is_op(P, "{")) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is"))
            pfail(P, c->off, "You cannot chain multiple tests with is");
        jnode *arg = parse_postfix(P, parse_primary(P));
        t->args.pos = palloc(P, sizeof(jnode *));
        t->args.pos[0] = arg;
        t->args.n_pos = 1;
    }
    if (negated) {
        jnode *nn = node(P, N_NOT, off);
        nn->a = t;
        return nn;
    }
    return t;
}

static jnode *parse_subscribed(parser *P)
{
    uint32_t off = cur(P)->off;
    jnode *args[3] = { NULL, NULL, NULL };
    if (is_op(P, ":")) {
        next(P);
    } else {
        jnode *e = parse_expression(P, true);
        if (!is_op(P, ":"))
            return e;
        next(P);
        args[0] = e;
    }
    if (is_op(P, ":")) {
        /* no stop */
    } else if (!is_op(P, "]") && !is_op(P, ",")) {
        args[1] = parse_expression(P, true);
    }
    if (is_op(P, ":")) {
        next(P);
        if (!is_op(P, "]") && !is_op(P, ","))
            args[2] = parse_expression(P, true);
    }
    jnode *s = node(P, N_SLICE, off);
    s->a = args[0];
    s->b = args[1];
    s->c = args[2];
    return s;
}

static jnode *parse_postfix(parser *P, jnode *n)
{
    for (;;) {
        uint32_t off = cur(P)->off;
        if (is_op(P, ".")) {
            next(P);
            jtoken *t = cur(P);
            if (t->type == TK_NAME) {
                jnode *g = node(P, N_GETATTR, off);
                g->a = n;
                g->name = expect_name(P);
                n = g;
            } else if (t->type == TK_INT) {
                jnode *k = node(P, N_CONST, t->off);
                k->v = jv_int(t->i);
                next(P);
                jnode *g = node(P, N_GETITEM, off);
                g->a = n;
                g->b = k;
                n = g;
            } else {
                unexpected(P, "a name or number");
            }
        } else if (is_op(P, "[")) {
            next(P);
            nvec args = {0};
            while (!is_op(P, "]")) {
                if (args.n)
                    expect_op(P, ",");
                nv_push(P, &args, parse_subscribed(P));
            }
            expect_op(P, "]");
            jnode *g = node(P, N_GETITEM, off);
            g->a = n;
            if (args.n == 1) {
                g->b = args.v[0];
            } else {
                jnode *tup = node(P, N_TUPLE, off);
                tup->kids = args.v;
                tup->n = args.n;
                g->b = tup;
            }
            n = g;
        } else if (is_op(P, "(")) {
            jnode *c = node(P, N_CALL, off);
            c->a = n;
            parse_call_args(P, &c->args);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_filter_expr(parser *P, jnode *n)
{
    for (;;) {
        if (is_op(P, "|")) {
            n = parse_filter(P, n, false);
        } else if (is_name(P, "is")) {
            n = parse_test(P, n);
        } else if (is_op(P, "(")) {
            jnode *c = node(P, N_CALL, cur(P)->off);
            c->a = n;
            parse_call_args(P, &c->args);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_primary(parser *P)
{
    jtoken *t = cur(P);
    jnode *n;
    enter(P);
    switch (t->type) {
    case TK_NAME:
        if (is_name(P, "true") || is_name(P, "True") || is_name(P, "false") || is_name(P, "False")) {
            n = node(P, N_CONST, t->off);
            n->v = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
            next(P);
        } else if (is_name(P, "none") || is_name(P, "None")) {
            n = node(P, N_CONST, t->off);
            n->v = jv_none();
            next(P);
        } else {
            n = node(P, N_NAME, t->off);
            n->name = expect_name(P);
            if (P->macro_flags) {
                if (!strcmp(n->name, "varargs"))
                    *P->macro_flags |= MF_VARARGS;
                else if (!strcmp(n->name, "kwargs"))
                    *P->macro_flags |= MF_KWARGS;
                else if (!strcmp(n->name, "caller"))
                    *P->macro_flags |= MF_CALLER;
            }
        }
        break;
    case TK_STRING: {
        /* adjacent literals concatenate */
        size_t total = 0, k = P->i;
        while (P->tk[k].type == TK_STRING)
            total += P->tk[k++].len;
        char *s = palloc(P, total + 1);
        size_t o = 0;
        while (cur(P)->type == TK_STRING) {
            jcopy(s + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            next(P);
        }
        n = node(P, N_CONST, t->off);
        jstr *js = palloc(P, sizeof(jstr) + total + 1);
        js->len = total;
        js->ascii = true;
        for (size_t i = 0; i < total; i++)
            if ((unsigned char)s[i] >= 0x80)
                js->ascii = false;
        jcopy(js->s, s, total);
        n->v.t = JT_STR;
        n->v.s = js;
        break;
    }
    case TK_INT:
        n = node(P, N_CONST, t->off);
        n->v = jv_int(t->i);
        next(P);
        break;
    case TK_FLOAT:
        n = node(P, N_CONST, t->off);
        n->v = jv_float(t->f);
        next(P);
        break;
    case TK_OP:
        if (is_op(P, "(")) {
            next(P);
            n = parse_tuple(P, false, true, NULL, true);
            expect_op(P, ")");
            break;
        }
        if (is_op(P, "[")) {
            n = node(P, N_LIST, t->off);
            next(P);
            nvec items = {0};
            while (!is_op(P, "]")) {
                if (items.n)
                    expect_op(P, ",");
                if (is_op(P, "]"))
                    break;
                nv_push(P, &items, parse_expression(P, true));
            }
            expect_op(P, "]");
            n->kids = items.v;
            n->n = items.n;
            break;
        }
        if (is_op(P, "{")) {
            n = node(P, N_DICT, t->off);
            next(P);
            nvec keys = {0}, vals = {0};
            while (!is_op(P, "}")) {
                if (keys.n)
                    expect_op(P, ",");
                if (is_op(P, "}"))
                    break;
                nv_push(P, &keys, parse_expression(P, true));
                expect_op(P, ":");
                nv_push(P, &vals, parse_expression(P, true));
            }
            expect_op(P, "}");
            n->kids = keys.v;
            n->kids2 = vals.v;
            n->n = keys.n;
            break;
        }
        /* fallthrough */
    default: {
        char b[64];
        pfail(P, t->off, "unexpected '%s'", describe(t, b, sizeof b));
    }
    }
    leave(P);
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter)
{
    jnode *n;
    uint32_t off = cur(P)->off;
    enter(P);
    if (is_op(P, "-") || is_op(P, "+")) {
        bool neg = is_op(P, "-");
        next(P);
        n = node(P, neg ? N_NEG : N_POS, off);
        n->a = parse_unary(P, false);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter)
        n = parse_filter_expr(P, n);
    leave(P);
    return n;
}

static jnode *binop(parser *P, int op, jnode *l, jnode *r, uint32_t off)
{
    jnode *n = node(P, N_BINOP, off);
    n->op = (uint16_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *P)
{
    jnode *l = parse_unary(P, true);
    while (is_op(P, "**")) {
        uint32_t off = cur(P)->off;
        next(P);
        l = binop(P, OP_POW, l, parse_unary(P, true), off);
    }
    return l;
}

static jnode *parse_math2(parser *P)
{
    jnode *l = parse_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV
               : is_op(P, "%") ? OP_MOD : -1;
        if (op < 0)
            return l;
        uint32_t off = cur(P)->off;
        next(P);
        l = binop(P, op, l, parse_pow(P), off);
    }
}

static jnode *parse_concat(parser *P)
{
    jnode *l = parse_math2(P);
    while (is_op(P, "~")) {
        uint32_t off = cur(P)->off;
        next(P);
        l = binop(P, OP_CONCAT, l, parse_math2(P), off);
    }
    return l;
}

static jnode *parse_math1(parser *P)
{
    jnode *l = parse_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : -1;
        if (op < 0)
            return l;
        uint32_t off = cur(P)->off;
        next(P);
        l = binop(P, op, l, parse_concat(P), off);
    }
}

static jnode *parse_compare(parser *P)
{
    uint32_t off = cur(P)->off;
    jnode *first = parse_math1(P);
    nvec operands = {0};
    uint8_t ops[64];
    size_t n_ops = 0;
    for (;;) {
        int op = is_op(P, "==") ? OP_EQ : is_op(P, "!=") ? OP_NE : is_op(P, "<") ? OP_LT
               : is_op(P, "<=") ? OP_LE : is_op(P, ">") ? OP_GT : is_op(P, ">=") ? OP_GE : -1;
        if (op >= 0) {
            next(P);
        } else if (is_name(P, "in")) {
            next(P);
            op = OP_IN;
        } else if (is_name(P, "not") && tok_is(peek(P), TK_NAME, "in")) {
            next(P);
            next(P);
            op = OP_NOTIN;
        } else {
            break;
        }
        if (n_ops == sizeof ops)
            pfail(P, off, "comparison chain too long");
        ops[n_ops++] = (uint8_t)op;
        nv_push(P, &operands, parse_math1(P));
    }
    if (!n_ops)
        return first;
    jnode *n = node(P, N_COMPARE, off);
    n->a = first;
    n->kids = operands.v;
    n->n = operands.n;
    n->ops = palloc(P, n_ops);
    jcopy(n->ops, ops, n_ops);
    return n;
}

static jnode *parse_not(parser *P)
{
    if (is_name(P, "not")) {
        uint32_t off = cur(P)->off;
        next(P);
        enter(P);
        jnode *n = node(P, N_NOT, off);
        n->a = parse_not(P);
        leave(P);
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P)
{
    jnode *l = parse_not(P);
    while (is_name(P, "and")) {
        uint32_t off = cur(P)->off;
        next(P);
        jnode *n = node(P, N_AND, off);
        n->a = l;
        n->b = parse_not(P);
        l = n;
    }
    return l;
}

static jnode *parse_or(parser *P)
{
    jnode *l = parse_and(P);
    while (is_name(P, "or")) {
        uint32_t off = cur(P)->off;
        next(P);
        jnode *n = node(P, N_OR, off);
        n->a = l;
        n->b = parse_and(P);
        l = n;
    }
    return l;
}

static jnode *parse_expression(parser *P, bool with_condexpr)
{
    enter(P);
    jnode *e = parse_or(P);
    if (with_condexpr) {
        while (is_name(P, "if")) {
            uint32_t off = cur(P)->off;
            next(P);
            jnode *n = node(P, N_COND, off);
            n->b = e;                /* value when true */
            n->a = parse_or(P);      /* test */
            if (is_name(P, "else")) {
                next(P);
                n->c = parse_expression(P, true);
            }
            e = n;
        }
    }
    leave(P);
    return e;
}

static bool is_tuple_end(parser *P, const char *extra_end)
{
    jtoken *t = cur(P);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || is_op(P, ")"))
        return true;
    return extra_end && is_name(P, extra_end);
}

static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens)
{
    uint32_t off = cur(P)->off;
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n)
            expect_op(P, ",");
        if (is_tuple_end(P, extra_end))
            break;
        jnode *e = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
        nv_push(P, &args, e);
        if (is_op(P, ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n)
            return args.v[0];
        if (!explicit_parens) {
            char b[64];
            pfail(P, cur(P)->off, "Expected an expression, got '%s'", describe(cur(P), b, sizeof b));
        }
    }
    jnode *t = node(P, N_TUPLE, off);
    t->kids = args.v;
    t->n = args.n;
    return t;
}

/* ---- statements ---- */

static jnode *parse_body(parser *P, const char *const *ends, const char **which);

static void check_assignable(parser *P, jnode *t)
{
    if (t->kind == N_NAME) {
        if (!strcmp(t->name, "true") || !strcmp(t->name, "false") || !strcmp(t->name, "none") ||
            !strcmp(t->name, "True") || !strcmp(t->name, "False") || !strcmp(t->name, "None"))
            pfail(P, t->off, "can't assign to '%s'", t->name);
        return;
    }
    if (t->kind == N_TUPLE) {
        for (size_t i = 0; i < t->n; i++)
            check_assignable(P, t->kids[i]);
        return;
    }
    if (t->kind == N_NSREF)
        return;
    pfail(P, t->off, "can't assign to this expression");
}

static jnode *parse_assign_target(parser *P, bool with_namespace, const char *extra_end)
{
    jnode *t;
    if (with_namespace && cur(P)->type == TK_NAME && tok_is(peek(P), TK_OP, ".")) {
        uint32_t off = cur(P)->off;
        t = node(P, N_NSREF, off);
        jnode *nm = node(P, N_NAME, off);
        nm->name = expect_name(P);
        next(P);
        t->a = nm;
        t->name = expect_name(P);
        return t;
    }
    t = parse_tuple(P, true, true, extra_end, false);
    check_assignable(P, t);
    return t;
}

static void parse_signature(parser *P, jnode *n)
{
    expect_op(P, "(");
    nvec params = {0}, defs = {0};
    bool any_default = false;
    while (!is_op(P, ")")) {
        if (params.n)
            expect_op(P, ",");
        uint32_t off = cur(P)->off;
        jnode *p = node(P, N_NAME, off);
        p->name = expect_name(P);
        jnode *d = NULL;
        if (is_op(P, "=")) {
            next(P);
            d = parse_expression(P, true);
            any_default = true;
        } else if (any_default) {
            pfail(P, off, "non-default argument follows default argument");
        }
        nv_push(P, &params, p);
        nv_push(P, &defs, d);
    }
    expect_op(P, ")");
    n->kids = params.v;
    n->kids2 = defs.v;
    n->n = params.n;
}

static jnode *parse_macro_like(parser *P, jnode *m, const char *end)
{
    int flags = 0, *saved = P->macro_flags, saved_loop = P->loop_depth;
    P->macro_flags = &flags;
    P->loop_depth = 0;
    const char *ends[] = { end, NULL };
    m->body = parse_body(P, ends, NULL);
    expect_block_end(P);
    P->macro_flags = saved;
    P->loop_depth = saved_loop;
    m->flags = flags;
    return m;
}

static jnode *parse_statement(parser *P)
{
    uint32_t off = cur(P)->off;
    next(P); /* {% */
    jtoken *t = cur(P);
    if (t->type != TK_NAME)
        pfail(P, t->off, "tag name expected");
    enter(P);
    jnode *n;
    if (is_name(P, "if")) {
        next(P);
        n = node(P, N_IF, off);
        jnode *cur_if = n;
        for (;;) {
            cur_if->a = parse_tuple(P, false, false, NULL, false);
            expect_block_end(P);
            static const char *const ends[] = { "elif", "else", "endif", NULL };
            const char *which;
            cur_if->body = parse_body(P, ends, &which);
            if (!strcmp(which, "elif")) {
                jnode *e = node(P, N_IF, cur(P)->off);
                jnode *wrap = node(P, N_BODY, e->off);
                wrap->kids = palloc(P, sizeof(jnode *));
                wrap->kids[0] = e;
                wrap->n = 1;
                cur_if->else_body = wrap;
                cur_if = e;
                continue;
            }
            if (!strcmp(which, "else")) {
                expect_block_end(P);
                static const char *const ends2[] = { "endif", NULL };
                cur_if->else_body = parse_body(P, ends2, NULL);
            }
            expect_block_end(P);
            break;
        }
    } else if (is_name(P, "for")) {
        next(P);
        n = node(P, N_FOR, off);
        n->a = parse_assign_target(P, false, "in");
        if (!is_name(P, "in"))
            unexpected(P, "'in'");
        next(P);
        n->b = parse_tuple(P, false, false, "recursive", false);
        if (is_name(P, "if")) {
            next(P);
            n->c = parse_expression(P, true);
        }
        if (is_name(P, "recursive")) {
            next(P);
            n->flags |= FF_RECURSIVE;
        }
        expect_block_end(P);
        P->loop_depth++;
        static const char *const ends[] = { "endfor", "else", NULL };
        const char *which;
        n->body = parse_body(P, ends, &which);
        P->loop_depth--;
        if (!strcmp(which, "else")) {
            expect_block_end(P);
            static const char *const ends2[] = { "endfor", NULL };
            n->else_body = parse_body(P, ends2, NULL);
        }
        expect_block_end(P);
    } else if (is_name(P, "set")) {
        next(P);
        jnode *target = parse_assign_target(P, true, NULL);
        if (is_op(P, "=")) {
            next(P);
            n = node(P, N_SET, off);
            n->a = target;
            n->b = parse_tuple(P, false, true, NULL, false);
            expect_block_end(P);
        } else {
            n = node(P, N_SETBLOCK, off);
            n->a = target;
            n->c = parse_filter(P, NULL, false);
            expect_block_end(P);
            static const char *const ends[] = { "endset", NULL };
            n->body = parse_body(P, ends, NULL);
            expect_block_end(P);
        }
    } else if (is_name(P, "macro")) {
        next(P);
        n = node(P, N_MACRO, off);
        n->name = expect_name(P);
        parse_signature(P, n);
        expect_block_end(P);
        parse_macro_like(P, n, "endmacro");
    } else if (is_name(P, "call")) {
        next(P);
        n = node(P, N_CALLBLOCK, off);
        jnode *m = node(P, N_MACRO, off);
        m->name = "caller";
        if (is_op(P, "("))
            parse_signature(P, m);
        n->a = parse_expression(P, true);
        if (n->a->kind != N_CALL)
            pfail(P, n->a->off, "expected call");
        expect_block_end(P);
        parse_macro_like(P, m, "endcall");
        n->b = m;
    } else if (is_name(P, "filter")) {
        next(P);
        n = node(P, N_FILTERBLOCK, off);
        n->c = parse_filter(P, NULL, true);
        expect_block_end(P);
        static const char *const ends[] = { "endfilter", NULL };
        n->body = parse_body(P, ends, NULL);
        expect_block_end(P);
    } else if (is_name(P, "with")) {
        next(P);
        n = node(P, N_WITH, off);
        nvec targets = {0}, values = {0};
        while (cur(P)->type != TK_BLOCK_END) {
            if (targets.n)
                expect_op(P, ",");
            nv_push(P, &targets, parse_assign_target(P, false, NULL));
            expect_op(P, "=");
            nv_push(P, &values, parse_expression(P, true));
        }
        expect_block_end(P);
        n->kids = targets.v;
        n->kids2 = values.v;
        n->n = targets.n;
        static const char *const ends[] = { "endwith", NULL };
        n->body = parse_body(P, ends, NULL);
        expect_block_end(P);
    } else if (is_name(P, "break") || is_name(P, "continue")) {
        bool brk = is_name(P, "break");
        if (!P->loop_depth)
            pfail(P, t->off, "'%s' outside of a loop", brk ? "break" : "continue");
        next(P);
        n = node(P, brk ? N_BREAK : N_CONTINUE, off);
        expect_block_end(P);
    } else if (is_name(P, "generation") || is_name(P, "block")) {
        /* {% generation %} (transformers) renders its body; a lone {% block %} renders in place */
        bool gen = is_name(P, "generation");
        next(P);
        if (!gen) {
            expect_name(P);
            if (is_name(P, "scoped"))
                next(P);
            if (is_name(P, "required"))
                next(P);
        }
        expect_block_end(P);
        n = node(P, N_SCOPE, off);
        const char *ends[] = { gen ? "endgeneration" : "endblock", NULL };
        n->body = parse_body(P, ends, NULL);
        if (!gen && cur(P)->type == TK_NAME)
            next(P);
        expect_block_end(P);
    } else if (is_name(P, "include") || is_name(P, "import") || is_name(P, "from") || is_name(P, "extends")) {
        pfail(P, t->off, "'%.*s' needs a template loader; chat templates have none", (int)t->len, t->s);
    } else {
        pfail(P, t->off, "Encountered unknown tag '%.*s'.", (int)(t->len > 40 ? 40 : t->len), t->s);
    }
    leave(P);
    return n;
}

/* Statements until "{% <one of ends>": consumes "{%" and the end name and sets *which to it;
 * the caller parses the rest of that tag. ends == NULL: until the end of the template. */
static jnode *parse_body(parser *P, const char *const *ends, const char **which)
{
    jnode *body = node(P, N_BODY, cur(P)->off);
    nvec items = {0};
    for (;;) {
        jtoken *t = cur(P);
        if (t->type == TK_EOF) {
            if (ends) {
                char want[256];
                size_t o = 0;
                for (int i = 0; ends[i] && o < sizeof want - 40; i++)
                    o += (size_t)snprintf(want + o, sizeof want - o, "%s'%s'", i ? " or " : "", ends[i]);
                pfail(P, t->off, "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
            }
            break;
        }
        if (t->type == TK_DATA) {
            jnode *d = node(P, N_DATA, t->off);
            jstr *s = palloc(P, sizeof(jstr) + t->len + 1);
            s->len = t->len;
            jcopy(s->s, t->s, t->len);
            d->v.t = JT_STR;
            d->v.s = s;
            nv_push(P, &items, d);
            next(P);
        } else if (t->type == TK_VAR_BEGIN) {
            next(P);
            jnode *p = node(P, N_PRINT, t->off);
            p->a = parse_tuple(P, false, true, NULL, false);
            if (cur(P)->type != TK_VAR_END)
                unexpected(P, "end of print statement");
            next(P);
            nv_push(P, &items, p);
        } else if (t->type == TK_BLOCK_BEGIN) {
            jtoken *nm = peek(P);
            bool is_end = false;
            if (nm->type == TK_NAME && ends)
                for (int i = 0; ends[i]; i++)
                    if (tok_is(nm, TK_NAME, ends[i])) {
                        next(P);
                        next(P);
                        if (which)
                            *which = ends[i];
                        is_end = true;
                        break;
                    }
            if (is_end)
                break;
            nv_push(P, &items, parse_statement(P));
        } else {
            char b[64];
            pfail(P, t->off, "unexpected '%s'", describe(t, b, sizeof b));
        }
    }
    body->kids = items.v;
    body->n = items.n;
    return body;
}

/* ---- unknown filters and tests ----
 * jinja 3 compiles an unknown filter or test into a runtime error when it sits in a "soft" frame
 * (an {% if %} test or body, a conditional expression), and refuses the template otherwise.
 * Loop, macro, block-set, filter-block and with bodies open new frames, which are not soft. */

static void check_stmt(parser *P, const jnode *n, bool soft);

static void check_expr(parser *P, const jnode *n, bool soft)
{
    if (!n)
        return;
    enter(P);
    if (n->kind == N_COND)
        soft = true;
    if ((n->kind == N_FILTER || n->kind == N_TEST) && !n->impl && !soft)
        pfail(P, n->off, "No %s named '%s'.", n->kind == N_FILTER ? "filter" : "test", n->name);
    check_expr(P, n->a, soft);
    check_expr(P, n->b, soft);
    check_expr(P, n->c, soft);
    if (n->kind == N_LIST || n->kind == N_TUPLE || n->kind == N_DICT || n->kind == N_COMPARE)
        for (size_t i = 0; i < n->n; i++) {
            check_expr(P, n->kids[i], soft);
            if (n->kind == N_DICT)
                check_expr(P, n->kids2[i], soft);
        }
    for (size_t i = 0; i < n->args.n_pos; i++)
        check_expr(P, n->args.pos[i], soft);
    for (size_t i = 0; i < n->args.n_kw; i++)
        check_expr(P, n->args.kwv[i], soft);
    check_expr(P, n->args.star, soft);
    check_expr(P, n->args.dstar, soft);
    leave(P);
}

static void check_macro(parser *P, const jnode *m)
{
    for (size_t i = 0; i < m->n; i++)
        check_expr(P, m->kids2[i], false);
    check_stmt(P, m->body, false);
}

static void check_stmt(parser *P, const jnode *n, bool soft)
{
    if (!n)
        return;
    enter(P);
    switch (n->kind) {
    case N_BODY:
        for (size_t i = 0; i < n->n; i++)
            check_stmt(P, n->kids[i], soft);
        break;
    case N_PRINT: check_expr(P, n->a, soft); break;
    case N_IF:
        check_expr(P, n->a, true);
        check_stmt(P, n->body, true);
        check_stmt(P, n->else_body, true);
        break;
    case N_FOR:
        check_expr(P, n->b, soft);
        check_expr(P, n->c, false);
        check_stmt(P, n->body, false);
        check_stmt(P, n->else_body, false);
        break;
    case N_SET: check_expr(P, n->b, soft); break;
    case N_SETBLOCK:
    case N_FILTERBLOCK:
        check_expr(P, n->c, false);
        check_stmt(P, n->body, false);
        break;
    case N_MACRO: check_macro(P, n); break;
    case N_CALLBLOCK:
        check_expr(P, n->a, soft);
        check_macro(P, n->b);
        break;
    case N_WITH:
        for (size_t i = 0; i < n->n; i++)
            check_expr(P, n->kids2[i], soft);
        check_stmt(P, n->body, false);
        break;
    case N_SCOPE: check_stmt(P, n->body, false); break;
    default: break;
    }
    leave(P);
}

int jinja_parse(jtemplate *t, const char *src, size_t len, cdx_err *err)
{
    size_t bad = cdx_utf8_check(src, len);
    if (bad != len) {
        return cdx_err_set(err, CDX_ETEMPLATE, "template syntax error: invalid UTF-8 at byte %zu", bad);
    }
    if (len > UINT32_MAX - 16)
        return cdx_err_set(err, CDX_ETEMPLATE, "template too large (%zu bytes)", len);
    /* newlines to \n, then drop one trailing newline (keep_trailing_newline=False) */
    char *s = ja_alloc(&t->arena, len + 1);
    if (!s)
        return cdx_err_set(err, CDX_ENOMEM, "template: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[o++] = src[i];
        }
    }
    if (o > 0 && s[o - 1] == '\n')
        o--;
    s[o] = 0;
    t->src = s;
    t->src_len = o;

    jtoken *toks;
    size_t n_toks;
    int rc = jinja_lex(t, &toks, &n_toks, err);
    if (rc < 0)
        return rc;
    parser P = { .t = t, .tk = toks, .n = n_toks, .err = err };
    if (setjmp(P.jb))
        return err && err->code ? err->code : CDX_ETEMPLATE;
    t->root = parse_body(&P, NULL, NULL);
    P.depth = 0;
    check_stmt(&P, t->root, false);
    return 0;
}
