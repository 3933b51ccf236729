/* caldrix template: renders a chat template exactly as transformers' apply_chat_template would. */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: caldrix template [MODEL] [--template FILE] --messages FILE.json\n"
            "                        [--no-generation-prompt] [--set KEY=JSON]... [--name NAME]\n"
            "\n"
            "Renders MODEL's chat template (a folder with tokenizer_config.json / chat_template.jinja /\n"
            "chat_template.json, or a .gguf) with the messages in FILE.json (a JSON array) and prints the\n"
            "text byte for byte, with no newline added.\n"
            "  --template FILE          render this template file instead (MODEL may then be omitted;\n"
            "                           when given, its special tokens are still passed)\n"
            "  --messages FILE.json     the conversation; '-' reads stdin\n"
            "  --no-generation-prompt   add_generation_prompt=false (default true)\n"
            "  --set KEY=JSON           one more template variable (tools, bos_token, enable_thinking,\n"
            "                           date_string, ...), a JSON value; overrides the defaults\n"
            "  --name NAME              a named template when the model has several (default: default); a\n"
            "                           name the model lacks, or --name with --template, exits 2\n"
            "Variables: messages, add_generation_prompt, tools and documents (none unless set), the\n"
            "model's special tokens, raise_exception, strftime_now.\n");
}

int cmd_template(int argc, char **argv)
{
    const char *model = NULL, *tmpl_file = NULL, *messages_file = NULL, *name = NULL;
    bool gen = true;
    int rc = 1;
    char *source = NULL, *out = NULL;
    json_t *tokens = NULL, *messages = NULL, *extra = json_object();
    cdx_tmpl *t = NULL;
    cdx_err err = {0};
    if (!extra) {
        fprintf(stderr, "caldrix template: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen = false;
        } else if (!strcmp(a, "--template") || !strcmp(a, "--messages") || !strcmp(a, "--set") || !strcmp(a, "--name")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "caldrix template: %s needs a value\n", a);
                rc = 2;
                goto done;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--template")) {
                tmpl_file = v;
            } else if (!strcmp(a, "--messages")) {
                messages_file = v;
            } else if (!strcmp(a, "--name")) {
                name = v;
            } else {
                const char *eq = strchr(v, '=');
                if (!eq || eq == v) {
                    fprintf(stderr, "caldrix template: --set \"%s\": expected KEY=JSON\n", v);
                    rc = 2;
                    goto done;
                }
                json_error_t je;
                json_t *val = json_loads(eq + 1, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
                if (!val) {
                    fprintf(stderr, "caldrix template: --set %.*s: the value is not JSON (%s): %s\n", (int)(eq - v), v,
                            je.text, eq + 1);
                    rc = 2;
                    goto done;
                }
                char key[256];
                snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
                json_object_set_new(extra, key, val);
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "caldrix template: unknown option %s (caldrix template --help)\n", a);
            rc = 2;
            goto done;
        } else if (!model) {
            model = a;
        } else {
            fprintf(stderr, "caldrix template: unexpected argument \"%s\"\n", a);
            rc = 2;
            goto done;
        }
    }
    if (!messages_file || (!model && !tmpl_file)) {
        usage(stderr);
        rc = 2;
        goto done;
    }
    bool named = name && strcmp(name, "default");
    if (named && tmpl_file) {
        fprintf(stderr, "caldrix template: --name \"%s\" picks one of the model's templates; --template %s is a "
                "single template, so there is nothing to pick (drop one of them)\n", name, tmpl_file);
        rc = 2;
        goto done;
    }
    if (model) {
        char *model_src = NULL;
        struct stat st;
        if (cdx_chat_template_load(model, name, &model_src, &tokens, &err) < 0) {
            /* a name the model does not have is a usage error, never a silent fallback */
            if (named && err.code == CDX_ENOTFOUND && stat(model, &st) == 0) {
                fprintf(stderr, "caldrix template: --name: %s\n", err.msg);
                rc = 2;
                goto done;
            }
            /* with --template the model only supplies tokens: a model without a template is fine */
            if (!tmpl_file || err.code != CDX_ENOTFOUND) {
                fprintf(stderr, "caldrix template: %s\n", err.msg);
                goto done;
            }
        }
        if (!tmpl_file)
            source = model_src;
        else
            free(model_src);
    }
    size_t src_len = 0;
    if (tmpl_file) {
        if (cdx_file_read_all(tmpl_file, (size_t)64 << 20, &source, &src_len, &err) < 0) {
            fprintf(stderr, "caldrix template: %s\n", err.msg);
            goto done;
        }
    } else {
        src_len = strlen(source);
    }
    json_error_t je;
    messages = !strcmp(messages_file, "-") ? json_loadf(stdin, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je)
                                           : json_load_file(messages_file, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!messages) {
        fprintf(stderr, "caldrix template: %s: line %d col %d: %s\n", messages_file, je.line, je.column, je.text);
        goto done;
    }
    if (!json_is_array(messages)) {
        fprintf(stderr, "caldrix template: %s: expected a JSON array of messages\n", messages_file);
        goto done;
    }
    if (cdx_tmpl_parse(source, src_len, &t, &err) < 0) {
        fprintf(stderr, "caldrix template: %s: %s\n", tmpl_file ? tmpl_file : model, err.msg);
        goto done;
    }
    size_t n = 0;
    if (cdx_chat_render(t, messages, gen, tokens, extra, &out, &n, &err) < 0) {
        fprintf(stderr, "caldrix template: %s\n", err.msg);
        goto done;
    }
    if (fwrite(out, 1, n, stdout) != n || fflush(stdout) != 0) {
        fprintf(stderr, "caldrix template: writing the output failed\n");
        goto done;
    }
    rc = 0;
done:
    free(out);
    cdx_tmpl_free(t);
    free(source);
    json_decref(messages);
    json_decref(tokens);
    json_decref(extra);
    return rc;
}
