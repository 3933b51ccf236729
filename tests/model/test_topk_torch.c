/* model_topk_torch (ops.c: the bf16 pass's MoE routing) against torch.topk's own picks among tied values
 * (tests/golden/torch-topk.json, scripts/goldens/torch-topk.py): the same set of indices for every case, on sizes
 * of both of PyTorch's paths (std::nth_element, std::partial_sort when k·64 <= n), and the values largest first. */
#include "model/ops.h"
#include "test.h"

#include <jansson.h>

static void picks_the_indices_torch_topk_picks_among_ties(void)
{
    json_error_t je;
    json_t *g = json_load_file("tests/golden/torch-topk.json", 0, &je);
    CHECKF(g, "tests/golden/torch-topk.json: %s", je.text);
    if (!g)
        return;
    size_t i, n_cases = 0, n_tied = 0;
    json_t *c;
    json_array_foreach(json_object_get(g, "cases"), i, c) {
        const char *at = json_string_value(json_object_get(c, "at"));
        const int64_t k = json_integer_value(json_object_get(c, "k")), n = (int64_t)strlen(at);
        json_t *lv = json_object_get(c, "levels"), *want = json_object_get(c, "indices");
        REQUIRE(n >= k && k >= 1 && n <= 512 && (size_t)k == json_array_size(want));
        float v[512], w[512];
        int32_t sel[512];
        for (int64_t j = 0; j < n; j++)
            v[j] = (float)json_number_value(json_array_get(lv, (size_t)(at[j] - 'a')));
        model_topk_torch(v, n, k, sel, w);
        bool in[512] = { 0 }, same = true;
        for (int64_t r = 0; r < k; r++) {
            REQUIRE(sel[r] >= 0 && sel[r] < n);
            in[sel[r]] = true;
            same &= w[r] == v[sel[r]] && (r == 0 || w[r] <= w[r - 1]);
        }
        for (int64_t r = 0; r < k; r++)
            same &= in[json_integer_value(json_array_get(want, (size_t)r))];
        CHECKF(same, "case %zu (n %lld, k %lld, %zu levels): not torch.topk's indices", i, (long long)n, (long long)k,
               json_array_size(lv));
        /* counted: a case where the lowest ids among equal values (the f32 path's rule) are not torch's */
        bool lowest = true;
        for (int64_t r = 0; r < k; r++) {
            const int64_t id = json_integer_value(json_array_get(want, (size_t)r));
            int64_t before = 0; /* the values the lower-id rule ranks above id */
            for (int64_t j = 0; j < n; j++)
                before += v[j] > v[id] || (v[j] == v[id] && j < id);
            lowest &= before < k;
        }
        n_tied += !lowest;
        n_cases++;
    }
    CHECKF(n_cases >= 100 && n_tied >= 50, "%zu cases, %zu where torch does not take the lowest tied ids", n_cases,
           n_tied);
    printf("  %zu cases, %zu of them where torch.topk does not take the lowest tied ids\n", n_cases, n_tied);
    json_decref(g);
}

int main(void)
{
    RUN("model_topk_torch picks the indices torch.topk picks among tied values", picks_the_indices_torch_topk_picks_among_ties);
    return t_done("topk_torch");
}
