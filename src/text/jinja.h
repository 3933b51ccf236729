/* The Jinja interpreter behind chat templates: internal types shared by jinja_*.c.
 *
 * Reference semantics: Python Jinja2 3.1 in the environment transformers builds for chat templates
 * (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), loopcontrols, a
 * {% generation %} tag, tojson = json.dumps(ensure_ascii=False)). Values follow Python: str is a
 * sequence of code points (we keep valid UTF-8 and count code points), int is int64 (overflow is an
 * error, where Python would grow), float prints as Python's repr.
 *
 * Memory: a parsed template lives in one arena; a render allocates everything (values, scopes,
 * buffers) from a second arena with a byte cap, freed in one go when the render ends. Errors
 * longjmp to the entry point, which is safe because nothing on the way holds a malloc of its own.
 */
#ifndef CDX_TEXT_JINJA_H
#define CDX_TEXT_JINJA_H

#include "caldrix/base.h"
#include "caldrix/template.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* memcpy that accepts (NULL, 0): empty lists and buffers have no storage. */
static inline void jcopy(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

/* ---- arena ---- */

typedef struct jchunk jchunk;
typedef struct jchunk_cache jchunk_cache;
typedef struct jarena {
    jchunk *head;
    jchunk *spare;     /* chunks from earlier renders, free to reuse */
    size_t used_bytes; /* bytes handed out or reserved in chunks */
    size_t cap_bytes;  /* 0: no cap */
} jarena;

/* NULL when the cap would be passed or malloc fails; memory is zeroed. */
void *ja_alloc(jarena *a, size_t n);
void *ja_alloc_raw(jarena *a, size_t n); /* not zeroed */
void ja_free_all(jarena *a);
/* A template keeps the chunks of its last renders (up to 64 MiB) under a mutex, so the next render
 * reuses warm memory; concurrent renders simply allocate their own. */
jchunk_cache *ja_cache_new(void);
void ja_cache_free(jchunk_cache *k);           /* NULL: no-op */
void ja_take_spares(jarena *a, jchunk_cache *k);
void ja_release(jarena *a, jchunk_cache *k);    /* frees or caches every chunk of a */

/* ---- values ---- */

enum { JT_UNDEF, JT_NONE, JT_BOOL, JT_INT, JT_FLOAT, JT_STR, JT_LIST, JT_DICT, JT_FUNC, JT_LOOP, JT_VIEW };

/* JT_VIEW: the lazy sequences Python hands templates instead of lists. Generators (map, select,
 * unique, batch, the items filter...) are consumed by iteration, have no len(), are always true and
 * do not serialize; dict views (d.items(), d.keys(), d.values()) and range() have a len() but do
 * not serialize either. Templates can tell the difference, so we keep it. */
enum { VK_GEN, VK_REVITER, VK_ITEMS, VK_KEYS, VK_VALUES, VK_RANGE };

typedef struct jstr {
    size_t len;     /* bytes, not counting the NUL */
    bool ascii;     /* every byte < 0x80: byte index == code point index */
    bool markup;    /* a markupsafe.Markup (from |safe, |escape): `+` escapes the other side */
    char s[];       /* NUL-terminated, valid UTF-8 */
} jstr;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;
typedef struct jview jview;

typedef struct jval {
    uint8_t t;
    union {
        bool b;
        int64_t i;
        double f;
        jstr *s;
        jlist *l;
        jdict *d;
        jfunc *fn;
        jloop *loop;
        jview *vw;
        const char *hint; /* JT_UNDEF: why it is undefined ("'x' is undefined"), may be NULL */
    };
} jval;

struct jlist {
    size_t n, cap;
    jval *v;
    bool tuple;
};

struct jdict {
    size_t n, cap;
    jval *k, *v; /* insertion order */
    bool ns;     /* a namespace(): attributes can be assigned with {% set ns.x = ... %} */
};

struct jview {
    uint8_t kind;        /* VK_* */
    jlist *items;        /* everything it yields */
    size_t pos;          /* generators and iterators: how many were consumed */
    const char *gen_name; /* VK_GEN: the Python function behind it, for printing */
    int64_t start, stop, step; /* VK_RANGE */
};

typedef struct jctx jctx;
typedef struct jnode jnode;
typedef struct jscope jscope;

/* Arguments of one call, evaluated. */
typedef struct jcall {
    jval *pos;
    size_t n_pos;
    const char **kw;
    jval *kwv;
    size_t n_kw;
} jcall;

typedef jval (*jbuiltin_fn)(jctx *c, jfunc *self, jcall *a, uint32_t off);

enum { JF_BUILTIN, JF_MACRO };

struct jfunc {
    int kind;
    const char *name;
    jval self;             /* bound receiver of a method (str.upper, dict.items, cycler.next, ...) */
    jbuiltin_fn fn;        /* JF_BUILTIN */
    const jnode *macro;    /* JF_MACRO: the N_MACRO node */
    jscope *closure;       /* JF_MACRO: the scope the macro was defined in */
    jfunc *caller;         /* JF_MACRO made by {% call %}: nothing; macros called with caller= get it */
    void *state;           /* cycler/joiner state */
};

/* ---- syntax tree ---- */

enum {
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER,
    N_TEST, N_BINOP, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_COMPARE, N_COND, N_NSREF,
    /* statements */
    N_BODY, N_DATA, N_PRINT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK,
    N_WITH, N_BREAK, N_CONTINUE, N_SCOPE,
};

/* Binary and comparison operators. */
enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
};

typedef struct jargs {
    jnode **pos;
    size_t n_pos;
    const char **kw;
    jnode **kwv;
    size_t n_kw;
    jnode *star, *dstar; /* *args, **kwargs */
} jargs;

struct jnode {
    uint16_t kind;
    uint16_t op;
    uint32_t off;          /* byte offset in the (normalized) source, for error positions */
    jnode *a, *b, *c;      /* children; meaning depends on kind (see jinja_parse.c) */
    jnode *body, *else_body;
    jnode **kids;          /* N_BODY statements, N_LIST/N_TUPLE items, N_DICT keys, N_COMPARE operands,
                              N_MACRO parameters, N_FOR/N_SET tuple targets */
    jnode **kids2;         /* N_DICT values, N_MACRO defaults (NULL entries: none) */
    uint8_t *ops;          /* N_COMPARE operators */
    size_t n;
    jargs args;            /* N_CALL, N_FILTER, N_TEST, N_CALLBLOCK's caller parameters */
    jval v;                /* N_CONST, N_DATA */
    const char *name;      /* N_NAME, N_GETATTR attribute, N_FILTER/N_TEST name, N_MACRO name */
    const void *impl;      /* N_FILTER/N_TEST: the builtin table row, resolved at parse time */
    int flags;
};

/* N_MACRO flags: which implicit names the body reads. N_FOR: recursive. */
enum { MF_VARARGS = 1, MF_KWARGS = 2, MF_CALLER = 4, FF_RECURSIVE = 8 };

/* ---- lexer / parser ---- */

typedef struct jtemplate {
    jarena arena;
    char *src;          /* normalized source (newlines are \n, one trailing newline removed) */
    jchunk_cache *cache; /* render memory kept between renders (NULL: none) */
    size_t src_len;
    jnode *root;
} jtemplate;

enum { TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STRING, TK_INT,
       TK_FLOAT, TK_OP, TK_EOF };

typedef struct jtoken {
    uint8_t type;
    uint32_t off;
    const char *s;   /* TK_NAME / TK_OP: the text; TK_DATA / TK_STRING: the decoded bytes */
    size_t len;
    int64_t i;       /* TK_INT */
    double f;        /* TK_FLOAT */
} jtoken;

/* Splits a normalized source into tokens (whitespace control, trim_blocks and lstrip_blocks
 * applied, comments dropped, raw blocks as data). The array ends with TK_EOF. */
int jinja_lex(jtemplate *t, jtoken **toks, size_t *n_toks, cdx_err *err);

/* Both fill err with "template syntax error at line L col C: ..." on failure. */
int jinja_parse(jtemplate *t, const char *src, size_t len, cdx_err *err);
void jinja_line_col(const char *src, size_t src_len, uint32_t off, int *line, int *col);

/* ---- render context ---- */

typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

struct jctx {
    jarena arena;
    const jtemplate *t;
    jmp_buf jb;
    cdx_err *err;
    jbuf *out;              /* where output goes now (macros and blocks capture into their own) */
    size_t max_output_bytes;
    uint64_t steps, max_steps;
    int depth, max_depth;
    int64_t now_s;          /* strftime_now's clock; < 0: the real clock */
    uint32_t cur_off;       /* the node being evaluated, for errors raised below it */
};

/* Stops the render: fills err with "template error at line L col C: msg" and longjmps. */
_Noreturn void jfail(jctx *c, uint32_t off, const char *fmt, ...) CDX_PRINTF(3, 4);
/* For raise_exception: the message is the template's own text. */
_Noreturn void jfail_raw(jctx *c, uint32_t off, const char *msg, size_t len);
void *jalloc(jctx *c, size_t n, uint32_t off); /* zeroed; never NULL: fails the render instead */
void *jalloc_raw(jctx *c, size_t n, uint32_t off); /* the same, not zeroed (strings, buffers, arrays) */

/* Buffers. */
void jb_put(jctx *c, jbuf *b, const char *s, size_t n);
void jb_puts(jctx *c, jbuf *b, const char *s);
void jb_putc(jctx *c, jbuf *b, char ch);
void jb_printf(jctx *c, jbuf *b, const char *fmt, ...) CDX_PRINTF(3, 4);
void jb_need(jctx *c, jbuf *b, size_t extra); /* room for extra more bytes */

/* Value constructors. */
static inline jval jv_undef(const char *hint) { jval v = { .t = JT_UNDEF }; v.hint = hint; return v; }
static inline jval jv_none(void) { jval v = { .t = JT_NONE }; return v; }
static inline jval jv_bool(bool b) { jval v = { .t = JT_BOOL }; v.b = b; return v; }
static inline jval jv_int(int64_t i) { jval v = { .t = JT_INT }; v.i = i; return v; }
static inline jval jv_float(double f) { jval v = { .t = JT_FLOAT }; v.f = f; return v; }
jval jv_str(jctx *c, const char *s, size_t n);
jval jv_cstr(jctx *c, const char *s);
jval jv_strbuf(jctx *c, const jbuf *b); /* turns the buffer into a string in place: use b no more */
jval jv_list(jctx *c, size_t cap, bool tuple);
jval jv_dict(jctx *c, size_t cap);
void jl_push(jctx *c, jlist *l, jval v);
jval *jd_get(jdict *d, jval key);                  /* NULL when absent */
jval *jd_get_s(jdict *d, const char *key);
void jd_set(jctx *c, jdict *d, jval key, jval v);
jval jv_func(jctx *c, const char *name, jbuiltin_fn fn, jval self);
jval jv_view(jctx *c, int kind, jlist *items);
jval jv_gen(jctx *c, const char *name, jlist *items);

/* Python semantics. */
bool jv_truthy(jval v);
bool jv_eq(jval a, jval b);
int jv_cmp(jctx *c, jval a, jval b, uint32_t off);  /* <0, 0, >0; fails on unorderable types */
const char *jv_type_name(jval v);                 /* Python's type name: 'str', 'dict', ... */
bool jv_is_num(jval v);                            /* int, float or bool */
double jv_as_double(jval v);
size_t jv_len(jctx *c, jval v, uint32_t off);      /* len(); fails on types without one */
size_t utf8_ncp(const char *s, size_t n);          /* code points in valid UTF-8 */
size_t utf8_cp_off(const jstr *s, size_t i);       /* byte offset of code point i (clamped) */

/* str() and repr() as Python prints them. */
void jv_write(jctx *c, jbuf *b, jval v, bool repr, int depth);
jstr *jv_to_str(jctx *c, jval v);
void py_float_repr(double d, char out[32]);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent: NULL for none. */
typedef struct jjson_opts {
    bool ensure_ascii, sort_keys, has_indent;
    const char *indent; size_t indent_len;
    const char *item_sep, *key_sep; size_t item_sep_len, key_sep_len;
} jjson_opts;
void jv_write_json(jctx *c, jbuf *b, jval v, const jjson_opts *o, int level, uint32_t off);

/* markupsafe: escape(v) (a Markup stays as it is) and Markup(v). */
jval jinja_escape(jctx *c, jval v);
jval jinja_markup(jctx *c, jval v);

/* Iteration: every iterable as a list (str: its characters; dict: its keys; undefined: empty). */
jlist *jv_iter_list(jctx *c, jval v, uint32_t off);

/* Conversions to/from jansson. */
struct json_t;
jval jv_from_json(jctx *c, const struct json_t *j, int depth);

/* Unicode helpers over utf8proc. */
bool py_isspace(int32_t cp);
bool py_isalnum(int32_t cp);
bool py_isprintable(int32_t cp);
int32_t utf8_next(const char *s, size_t n, size_t *i); /* decodes one code point at s[*i], advances */

/* ---- builtins (jinja_builtins.c) ---- */

typedef jval (*jfilter_fn)(jctx *c, jval v, jcall *a, uint32_t off);
typedef bool (*jtest_fn)(jctx *c, jval v, jcall *a, uint32_t off);
typedef struct jfilter_row { const char *name; jfilter_fn fn; } jfilter_row;
typedef struct jtest_row { const char *name; jtest_fn fn; } jtest_row;
const jfilter_row *jinja_find_filter(const char *name);
const jtest_row *jinja_find_test(const char *name);
/* A global function (range, namespace, dict, cycler, joiner, raise_exception, strftime_now). */
bool jinja_global(jctx *c, const char *name, jval *out);
/* obj.name: a method bound to obj, or false when obj's type has no such method. */
bool jinja_method(jctx *c, jval obj, const char *name, jval *out);

/* Binds call arguments to named parameters, as Python does for a builtin with defaults.
 * names: NULL-terminated. out[i] gets the argument or stays JT_UNDEF with hint NULL when absent. */
void jbind(jctx *c, jcall *a, uint32_t off, const char *fname, const char *const *names, jval *out);
static inline bool jarg_given(jval v) { return !(v.t == JT_UNDEF && v.hint == NULL); }

/* ---- evaluator (jinja_eval.c) ---- */

jval jinja_call(jctx *c, jval fn, jcall *a, uint32_t off);
jval jinja_getattr(jctx *c, jval obj, const char *name, uint32_t off);
jval jinja_getitem(jctx *c, jval obj, jval key, uint32_t off);
void jinja_step(jctx *c, uint32_t off, uint64_t n);   /* charges n steps against the budget */
int jinja_render(const jtemplate *t, const struct json_t *vars, const cdx_tmpl_opts *opts,
                 char **out, size_t *out_len, cdx_err *err);

#endif
