/* caldrix finetune / caldrix distill: reads the training data (pre-tokenized, prompt/completion or
 * chat), builds each optimizer step's sequences in the data order, and drives the library's trainer
 * (cdx_trainer_*), saving adapters or checkpoints and a JSON line per step. */
#include "cli.h"
#include "cli_hub.h"
#include "caldrix/train.h"
#include "caldrix/template.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void ft_usage(FILE *f, bool distill)
{
    if (distill)
        fprintf(f, "usage: caldrix distill --teacher MODEL --student MODEL --data FILE.jsonl --out DIR\n"
                   "         [--temperature T] [--kd-weight A] [finetune's options]\n\n"
                   "Trains the student (a safetensors checkpoint: LoRA by default, or --full) on\n"
                   "A·KD + (1−A)·CE, KD = KL(softmax(teacher/T) ‖ softmax(student/T))·T² averaged over the\n"
                   "scored tokens (F.kl_div(..., reduction='batchmean')·T²), CE the finetune loss on the same\n"
                   "positions. The teacher is any model caldrix runs (GGUF, quantized included) with the\n"
                   "student's vocabulary; it is only read. Defaults: T 1, A 0.5.\n\n");
    fprintf(f,
            "usage: caldrix finetune MODEL --data FILE.jsonl --out DIR\n"
            "         [--lora-r R --lora-alpha A --lora-targets q_proj,v_proj | --full]\n"
            "         [--lr F] [--steps N | --epochs N] [--batch B] [--grad-accum G] [--weight-decay W]\n"
            "         [--seed S] [--no-shuffle] [--init-adapter DIR] [--save-at 1,10,30] [--log FILE.jsonl]\n"
            "         [--checkpoint-every N] [--resume DIR/checkpoint-N] [-t THREADS]\n\n"
            "MODEL is a safetensors checkpoint (F32, F16 or BF16) of a dense llama, mistral, qwen2 or qwen3\n"
            "model; training computes in f32. A GGUF file is refused: train from the publisher's checkpoint.\n\n"
            "data, one JSON object a line (docs/train.md):\n"
            "  {\"input_ids\": [...], \"labels\": [...]}  used as given (labels -100: not scored; no labels: all)\n"
            "  {\"prompt\": \"...\", \"completion\": \"...\"}  loss on the completion (+ EOS) only\n"
            "  {\"messages\": [...]}  rendered with the model's chat template, loss on assistant turns only\n\n"
            "options:\n"
            "  --lora-r R            LoRA rank (default 8)\n"
            "  --lora-alpha A        scaling alpha / r (default 2·r)\n"
            "  --lora-targets LIST   of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj (default q_proj,v_proj)\n"
            "  --full                train every tensor instead (embeddings, norms and head included)\n"
            "  --lr F                AdamW's constant learning rate (default 1e-4)\n"
            "  --steps N             optimizer steps (default: one epoch)\n"
            "  --epochs N            steps = ceil(N · examples / (batch · grad-accum))\n"
            "  --batch B             sequences per micro-batch (default 1)\n"
            "  --grad-accum G        micro-batches per optimizer step (default 1); the loss of a step is the\n"
            "                        sum over its B·G sequences divided by their scored tokens\n"
            "  --weight-decay W      AdamW's decoupled decay (default 0), on every trainable tensor\n"
            "  --seed S              the data order and LoRA's A (default 42)\n"
            "  --no-shuffle          read the examples cyclically in file order (else each epoch a seeded\n"
            "                        permutation)\n"
            "  --init-adapter DIR    start from this PEFT adapter (its r, alpha and targets)\n"
            "  --save-at LIST        also write DIR/step-N/ after those optimizer steps\n"
            "  --log FILE            one line per step: {\"step\", \"loss\", \"tokens\", \"lr\"} (step from 0)\n"
            "  --checkpoint-every N  write DIR/checkpoint-N/ (adapter or model + optimizer state) every N steps\n"
            "  --resume DIR          continue from such a checkpoint, to the same numbers as an uninterrupted run\n"
            "                        (a LoRA checkpoint brings its r, alpha and targets; options given must agree)\n"
            "  -t, --threads N       threads (default: every core); the numbers do not depend on it\n");
}

/* ---- the data ---- */

typedef struct {
    int32_t *ids, *labels;
    int64_t n;
} example;

static int push_ids(example *e, size_t *cap, const int32_t *ids, size_t n, bool scored)
{
    if ((size_t)e->n + n > *cap) {
        size_t c = (*cap ? *cap * 2 : 64);
        while (c < (size_t)e->n + n)
            c *= 2;
        int32_t *a = realloc(e->ids, c * sizeof *a), *b = a ? realloc(e->labels, c * sizeof *b) : NULL;
        if (a)
            e->ids = a;
        if (!b)
            return -1;
        e->labels = b;
        *cap = c;
    }
    for (size_t i = 0; i < n; i++) {
        e->ids[e->n + (int64_t)i] = ids[i];
        e->labels[e->n + (int64_t)i] = scored ? ids[i] : -100;
    }
    e->n += (int64_t)n;
    return 0;
}

static int tok_text(const cdx_tok *tok, const char *s, size_t len, bool special, int32_t **ids, size_t *n,
                    cdx_err *err)
{
    size_t need = 0;
    int rc = cdx_tok_encode(tok, s, len, special, true, NULL, 0, &need, err);
    if (rc)
        return rc;
    *ids = malloc((need + 1) * sizeof **ids);
    if (!*ids)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    return cdx_tok_encode(tok, s, len, special, true, *ids, need, n, err);
}

/* One line into an example; 0, or prints "FILE:LINE: why" and returns -1. */
static int parse_example(const char *file, int line, json_t *o, const cdx_loaded *ld, example *e)
{
    size_t cap = 0;
    cdx_err err = { 0 };
    json_t *ii = json_object_get(o, "input_ids"), *pr = json_object_get(o, "prompt"),
           *msgs = json_object_get(o, "messages");
    if (ii) {
        json_t *lb = json_object_get(o, "labels");
        if (!json_is_array(ii) || !json_array_size(ii) || (lb && (!json_is_array(lb) ||
                                                                  json_array_size(lb) != json_array_size(ii)))) {
            fprintf(stderr, "caldrix: %s:%d: input_ids must be a non-empty array of ids and labels (when given) an "
                            "array of the same length (%zu and %zu)\n", file, line, json_array_size(ii),
                    json_array_size(lb));
            return -1;
        }
        for (size_t i = 0; i < json_array_size(ii); i++) {
            json_t *a = json_array_get(ii, i), *b = lb ? json_array_get(lb, i) : a;
            if (!json_is_integer(a) || !json_is_integer(b) || json_integer_value(a) < 0 ||
                json_integer_value(a) > INT32_MAX || json_integer_value(b) < -100 || json_integer_value(b) > INT32_MAX) {
                fprintf(stderr, "caldrix: %s:%d: input_ids[%zu] / labels[%zu] must be token ids (labels: or -100)\n",
                        file, line, i, i);
                return -1;
            }
            int32_t id = (int32_t)json_integer_value(a);
            if (push_ids(e, &cap, &id, 1, true))
                goto oom;
            e->labels[e->n - 1] = (int32_t)json_integer_value(b);
        }
        return 0;
    }
    if (!ld->tok) {
        fprintf(stderr, "caldrix: %s:%d: text data needs the model's tokenizer, and the model has none (give "
                        "input_ids)\n", file, line);
        return -1;
    }
    if (pr) {
        json_t *co = json_object_get(o, "completion");
        if (!json_is_string(pr) || !json_is_string(co)) {
            fprintf(stderr, "caldrix: %s:%d: \"prompt\" and \"completion\" must both be strings\n", file, line);
            return -1;
        }
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (tok_text(ld->tok, json_string_value(pr), json_string_length(pr), true, &a, &na, &err) ||
            tok_text(ld->tok, json_string_value(co), json_string_length(co), false, &b, &nb, &err)) {
            free(a);
            free(b);
            fprintf(stderr, "caldrix: %s:%d: %s\n", file, line, err.msg);
            return -1;
        }
        int32_t eos = cdx_tok_eos(ld->tok);
        int bad = push_ids(e, &cap, a, na, false) || push_ids(e, &cap, b, nb, true) ||
                  (eos >= 0 && push_ids(e, &cap, &eos, 1, true));
        free(a);
        free(b);
        if (bad)
            goto oom;
        return 0;
    }
    if (msgs) {
        if (!json_is_array(msgs) || !json_array_size(msgs)) {
            fprintf(stderr, "caldrix: %s:%d: \"messages\" must be a non-empty array\n", file, line);
            return -1;
        }
        if (!ld->chat.tmpl) {
            fprintf(stderr, "caldrix: %s:%d: chat data needs a chat template\n", file, line);
            return -1;
        }
        /* Pieces between turn boundaries: the render of messages[:i] (with the generation prompt before an
         * assistant turn) is a prefix of the render of messages[:i+1]; each piece is tokenized on its own
         * and scored when it is an assistant turn. */
        size_t done = 0;
        char *prev = NULL;
        for (size_t i = 0; i < json_array_size(msgs); i++) {
            json_t *m = json_array_get(msgs, i);
            const char *role = json_string_value(json_object_get(m, "role"));
            if (!role) {
                fprintf(stderr, "caldrix: %s:%d: messages[%zu] has no \"role\"\n", file, line, i);
                free(prev);
                return -1;
            }
            bool asst = !strcmp(role, "assistant");
            json_t *upto = json_array();
            for (size_t j = 0; j <= i; j++)
                json_array_append(upto, json_array_get(msgs, j));
            char *full = NULL, *head = NULL;
            size_t fl = 0, hl = 0;
            int rc = cdx_chat_render(ld->chat.tmpl, upto, false, ld->chat.tokens, NULL, &full, &fl, &err);
            if (!rc && asst) {
                json_array_remove(upto, i);
                rc = cdx_chat_render(ld->chat.tmpl, upto, true, ld->chat.tokens, NULL, &head, &hl, &err);
            }
            json_decref(upto);
            if (rc || (asst && (hl < done || hl > fl || memcmp(head, full, hl))) || fl < done ||
                (prev && memcmp(prev, full, done))) {
                fprintf(stderr, "caldrix: %s:%d: %s\n", file, line, rc ? err.msg :
                        "the chat template's render of the first turns is not a prefix of the next one's; "
                        "give this example as input_ids/labels");
                free(full); free(head); free(prev);
                return -1;
            }
            size_t cut[3] = { done, asst ? hl : done, fl };
            for (int p = 0; p < 2; p++) {
                if (cut[p + 1] <= cut[p])
                    continue;
                int32_t *ids = NULL;
                size_t n = 0;
                if (tok_text(ld->tok, full + cut[p], cut[p + 1] - cut[p], cut[p] == 0 && ld->chat.chatml, &ids, &n, &err)) {
                    fprintf(stderr, "caldrix: %s:%d: %s\n", file, line, err.msg);
                    free(full); free(head); free(prev); free(ids);
                    return -1;
                }
                int bad = push_ids(e, &cap, ids, n, p == 1);
                free(ids);
                if (bad) {
                    free(full); free(head); free(prev);
                    goto oom;
                }
            }
            done = fl;
            free(prev);
            free(head);
            prev = full;
        }
        free(prev);
        if (!e->n) {
            fprintf(stderr, "caldrix: %s:%d: the messages render to nothing\n", file, line);
            return -1;
        }
        return 0;
    }
    fprintf(stderr, "caldrix: %s:%d: an example needs \"input_ids\" (with \"labels\"), \"prompt\" and "
                    "\"completion\", or \"messages\"\n", file, line);
    return -1;
oom:
    fprintf(stderr, "caldrix: out of memory\n");
    return -1;
}

static int read_data(const char *path, const cdx_loaded *ld, example **out, int64_t *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "caldrix: --data %s: cannot open\n", path);
        return -1;
    }
    example *ex = NULL;
    int64_t n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int ln = 0, rc = 0;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        ln++;
        size_t i = 0;
        while (i < (size_t)len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\n' || line[i] == '\r'))
            i++;
        if (i == (size_t)len)
            continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)len, 0, &je);
        if (!o || !json_is_object(o)) {
            fprintf(stderr, "caldrix: %s:%d: not a JSON object (%s)\n", path, ln, o ? "another value" : je.text);
            json_decref(o);
            rc = -1;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            example *p = realloc(ex, (size_t)cap * sizeof *p);
            if (!p) {
                json_decref(o);
                rc = -1;
                break;
            }
            ex = p;
        }
        memset(&ex[n], 0, sizeof ex[n]);
        rc = parse_example(path, ln, o, ld, &ex[n]);
        json_decref(o);
        n++;
        if (rc)
            break;
    }
    free(line);
    fclose(f);
    if (!rc && !n) {
        fprintf(stderr, "caldrix: --data %s: no examples\n", path);
        rc = -1;
    }
    if (rc) {
        for (int64_t i = 0; i < n; i++)
            free(ex[i].ids), free(ex[i].labels);
        free(ex);
        return -1;
    }
    *out = ex;
    *n_out = n;
    return 0;
}

/* The example at global position k of the data order: cyclic in file order, or per epoch a
 * permutation drawn from (seed, epoch) — a pure function of k, so a resumed run reads what the
 * uninterrupted one would. */
static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t example_at(int64_t k, int64_t n, bool shuffle, uint64_t seed, int64_t *perm, int64_t *perm_epoch)
{
    const int64_t epoch = k / n, i = k % n;
    if (!shuffle)
        return i;
    if (*perm_epoch != epoch) {
        for (int64_t j = 0; j < n; j++)
            perm[j] = j;
        uint64_t s = mix(seed ^ mix((uint64_t)epoch + 1));
        for (int64_t j = n - 1; j > 0; j--) { /* Fisher-Yates */
            s = mix(s);
            int64_t r = (int64_t)(s % (uint64_t)(j + 1)), tmp = perm[j];
            perm[j] = perm[r];
            perm[r] = tmp;
        }
        *perm_epoch = epoch;
    }
    return perm[i];
}

static int parse_list(const char *s, int64_t **out, int *n)
{
    *n = 0;
    *out = NULL;
    for (const char *p = s; p && *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || (*end && *end != ','))
            return -1;
        int64_t *a = realloc(*out, (size_t)(*n + 1) * sizeof *a);
        if (!a)
            return -1;
        *out = a;
        a[(*n)++] = v;
        p = *end ? end + 1 : NULL;
    }
    return *n ? 0 : -1;
}

static int run(int argc, char **argv, bool distill)
{
    const char *cmd = distill ? "caldrix distill" : "caldrix finetune";
    const char *ref = NULL, *teacher_ref = NULL, *data = NULL, *outdir = NULL, *targets = NULL, *init = NULL,
               *save_at_s = NULL, *log_path = NULL, *resume = NULL;
    long r = 0, steps = 0, epochs = 0, batch = 1, accum = 1, threads = 0, ckpt_every = 0;
    double alpha = 0, lr = 1e-4, wd = 0, temp = 1.0, kdw = 0.5;
    long long seed = 42;
    bool full = false, no_shuffle = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            ft_usage(stdout, distill);
            return 0;
        }
#define VAL(opt) (!strcmp(a, opt) && more)
        if (VAL("--data")) data = argv[++i];
        else if (VAL("--out")) outdir = argv[++i];
        else if (VAL("--lora-r")) { if (cli_parse_int(a, argv[++i], 1, 4096, &r)) return 2; }
        else if (VAL("--lora-alpha")) { if (cli_parse_float(a, argv[++i], 1e-9, 1e9, &alpha)) return 2; }
        else if (VAL("--lora-targets")) targets = argv[++i];
        else if (!strcmp(a, "--full")) full = true;
        else if (VAL("--lr")) { if (cli_parse_float(a, argv[++i], 1e-12, 10, &lr)) return 2; }
        else if (VAL("--steps")) { if (cli_parse_int(a, argv[++i], 1, 1L << 40, &steps)) return 2; }
        else if (VAL("--epochs")) { if (cli_parse_int(a, argv[++i], 1, 1 << 20, &epochs)) return 2; }
        else if (VAL("--batch")) { if (cli_parse_int(a, argv[++i], 1, 1 << 16, &batch)) return 2; }
        else if (VAL("--grad-accum")) { if (cli_parse_int(a, argv[++i], 1, 1 << 16, &accum)) return 2; }
        else if (VAL("--weight-decay")) { if (cli_parse_float(a, argv[++i], 0, 100, &wd)) return 2; }
        else if (VAL("--seed")) { long v; if (cli_parse_int(a, argv[++i], 0, 1L << 62, &v)) return 2; seed = v; }
        else if (!strcmp(a, "--no-shuffle")) no_shuffle = true;
        else if (VAL("--init-adapter")) init = argv[++i];
        else if (VAL("--save-at")) save_at_s = argv[++i];
        else if (VAL("--log")) log_path = argv[++i];
        else if (VAL("--checkpoint-every")) { if (cli_parse_int(a, argv[++i], 1, 1L << 40, &ckpt_every)) return 2; }
        else if (VAL("--resume")) resume = argv[++i];
        else if (VAL("-t") || VAL("--threads")) { if (cli_parse_engine_opt(a, argv[++i], CDX_OPT_THREADS, &threads)) return 2; }
        else if (distill && VAL("--teacher")) teacher_ref = argv[++i];
        else if (distill && VAL("--student")) ref = argv[++i];
        else if (distill && VAL("--temperature")) { if (cli_parse_float(a, argv[++i], 1e-6, 1e6, &temp)) return 2; }
        else if (distill && VAL("--kd-weight")) { if (cli_parse_float(a, argv[++i], 0, 1, &kdw)) return 2; }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "%s: %s: unknown option or missing value (%s --help)\n", cmd, a, cmd);
            return 2;
        } else if (!ref && !distill) ref = a;
        else {
            fprintf(stderr, "%s: unexpected argument \"%s\"\n", cmd, a);
            return 2;
        }
#undef VAL
    }
    if (!ref || !data || !outdir || (distill && !teacher_ref)) {
        ft_usage(stderr, distill);
        return 2;
    }
    if (full && (r || alpha || targets || init)) {
        fprintf(stderr, "%s: --full trains every tensor; --lora-r, --lora-alpha, --lora-targets and --init-adapter "
                        "are LoRA's\n", cmd);
        return 2;
    }
    if (steps && epochs) {
        fprintf(stderr, "%s: give --steps or --epochs, not both\n", cmd);
        return 2;
    }
    int64_t *save_at = NULL;
    int n_save_at = 0;
    if (save_at_s && parse_list(save_at_s, &save_at, &n_save_at)) {
        fprintf(stderr, "%s: --save-at \"%s\" is not a list of step numbers >= 1 (1,10,30)\n", cmd, save_at_s);
        return 2;
    }
    cdx_train_opts o = cdx_train_defaults();
    o.full = full;
    cdx_err err = { 0 };
    if (!full) {
        if (targets && cdx_lora_targets_parse(targets, &o.lora_targets, &err)) {
            fprintf(stderr, "%s: --lora-targets: %s\n", cmd, err.msg);
            free(save_at);
            return 2;
        }
        /* a LoRA checkpoint to resume brings its adapter's r, alpha and targets, as an init adapter
         * does: options given must agree with them (cdx_trainer_create), and none need repeating */
        if (!init && resume)
            init = resume;
        if (!init) { /* defaults; an init adapter brings its own */
            o.lora_r = r ? r : 8;
            o.lora_alpha = alpha ? alpha : 2.0 * (double)o.lora_r;
            if (!o.lora_targets)
                o.lora_targets = CDX_LORA_Q | CDX_LORA_V;
        } else {
            o.lora_r = r;
            o.lora_alpha = alpha;
        }
    }
    o.lr = lr;
    o.weight_decay = wd;
    o.seed = (uint64_t)seed;
    o.init_adapter = init;
    o.n_threads = (int)threads;
    o.temperature = temp;
    o.kd_weight = kdw;

    int status = 1;
    cli_hub_ui hui;
    cdx_hub_opts ho;
    cli_hub_opts_init(&ho, &hui, false);
    cdx_load_opts lo = cli_load_opts(&ho, CDX_DTYPE_F32, 0);
    lo.chat = true;
    cdx_loaded *ld = NULL, *tld = NULL;
    example *ex = NULL;
    int64_t n_ex = 0, *perm = NULL;
    cdx_trainer *t = NULL;
    FILE *logf = NULL;
    if (cdx_load(ref, &lo, &ld, NULL, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        free(save_at);
        return 1;
    }
    if (distill) {
        cdx_load_opts tlo = cli_load_opts(&ho, CDX_DTYPE_AUTO, 0);
        tlo.tokenizer = false;
        if (cdx_load(teacher_ref, &tlo, &tld, NULL, &err)) {
            fprintf(stderr, "%s: teacher: %s\n", cmd, err.msg);
            goto done;
        }
        o.teacher = tld->model;
    }
    o.base_name = ld->path ? ld->path : ref;
    int rc = cdx_trainer_create(ld->model, &o, &t, &err);
    if (rc) {
        fprintf(stderr, "%s: %s: %s\n", cmd, ld->path ? ld->path : ref, err.msg);
        status = rc == CDX_EUNSUPPORTED || rc == CDX_EINVAL || rc == CDX_EFORMAT ? 2 : 1;
        goto done;
    }
    if (read_data(data, ld, &ex, &n_ex)) {
        status = 2;
        goto done;
    }
    const int64_t per_step = batch * accum;
    const int64_t total = steps ? steps : (int64_t)ceil((double)(epochs ? epochs : 1) * (double)n_ex / (double)per_step);
    if (!(perm = malloc((size_t)n_ex * sizeof *perm))) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        goto done;
    }
    if (resume) {
        rc = cdx_trainer_load_checkpoint(t, resume, &err);
        if (rc != 1) {
            fprintf(stderr, "%s: --resume %s: %s\n", cmd, resume, rc ? err.msg : "has no optimizer state "
                    "(optimizer.safetensors, trainer_state.json): not a checkpoint");
            status = 2;
            goto done;
        }
    }
    if (log_path && !(logf = fopen(log_path, resume ? "a" : "w"))) {
        fprintf(stderr, "%s: --log %s: cannot open\n", cmd, log_path);
        goto done;
    }
    cdx_train_seq *seqs = malloc((size_t)per_step * sizeof *seqs);
    if (!seqs) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        goto done;
    }
    int64_t perm_epoch = -1;
    const double t0 = cdx_time_ms();
    int64_t tok_all = 0;
    for (int64_t k = cdx_trainer_steps_done(t); k < total; k++) {
        for (int64_t j = 0; j < per_step; j++) {
            const example *e = &ex[example_at(k * per_step + j, n_ex, !no_shuffle, (uint64_t)seed, perm, &perm_epoch)];
            seqs[j] = (cdx_train_seq){ .ids = e->ids, .labels = e->labels, .n = e->n };
        }
        cdx_train_stats st;
        if ((rc = cdx_trainer_step(t, seqs, (int)per_step, &st, &err))) {
            fprintf(stderr, "%s: %s: step %lld: %s\n", cmd, data, (long long)k, err.msg);
            status = rc == CDX_EINVAL ? 2 : 1;
            free(seqs);
            goto done;
        }
        tok_all += st.tokens;
        const double el = (cdx_time_ms() - t0) / 1000.0;
        fprintf(stderr, "step %lld/%lld  loss %.6f  %lld tokens  %.1f tok/s\n", (long long)k + 1, (long long)total,
                st.loss, (long long)st.tokens, el > 0 ? (double)tok_all / el : 0.0);
        if (logf) {
            fprintf(logf, "{\"step\": %lld, \"loss\": %.9g, \"tokens\": %lld, \"lr\": %.9g", (long long)k, st.loss,
                    (long long)st.tokens, lr);
            if (distill)
                fprintf(logf, ", \"ce\": %.9g, \"kd\": %.9g", st.ce, st.kd);
            fprintf(logf, ", \"num_items\": %lld}\n", (long long)st.num_items);
            fflush(logf);
        }
        char path[4200];
        for (int s = 0; s < n_save_at; s++)
            if (save_at[s] == k + 1) {
                snprintf(path, sizeof path, "%s/step-%lld", outdir, (long long)k + 1);
                if (cdx_trainer_save(t, path, &err)) {
                    fprintf(stderr, "%s: %s\n", cmd, err.msg);
                    free(seqs);
                    goto done;
                }
            }
        if (ckpt_every && (k + 1) % ckpt_every == 0) {
            snprintf(path, sizeof path, "%s/checkpoint-%lld", outdir, (long long)k + 1);
            if (cdx_trainer_save_checkpoint(t, path, NULL, &err)) {
                fprintf(stderr, "%s: %s\n", cmd, err.msg);
                free(seqs);
                goto done;
            }
        }
    }
    free(seqs);
    if (cdx_trainer_save(t, outdir, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        goto done;
    }
    fprintf(stderr, "%s: wrote %s\n", cmd, outdir);
    status = 0;
done:
    if (logf)
        fclose(logf);
    cdx_trainer_free(t);
    for (int64_t i = 0; i < n_ex; i++)
        free(ex[i].ids), free(ex[i].labels);
    free(ex);
    free(perm);
    free(save_at);
    cdx_load_close(tld);
    cdx_load_close(ld);
    return status;
}

int cmd_finetune(int argc, char **argv) { return run(argc, argv, false); }
int cmd_distill(int argc, char **argv) { return run(argc, argv, true); }
