/* The Jinja interpreter against Python Jinja2 3.1.6 in transformers' chat-template environment
 * (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), tojson = json.dumps with
 * ensure_ascii=False). Every expected string in the two tables below is what Python rendered (or
 * the message it raised) for that template and those variables; none comes from caldrix. */
#include "caldrix.h"
#include "test.h"

#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *tmpl, *vars, *want;
} tcase;

/* Rendered by Python Jinja2 (strftime_now at Unix time 1700000000, UTC). */
static const tcase k_render[] = {
    { "{{ 1 + 2 }}|{{ 1 - 5 }}|{{ 2 * 3.5 }}|{{ 7 / 2 }}|{{ 6 / 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 2 ** 10 }}|{{ 2 ** 3 ** 2 }}|{{ 2 ** -1 }}",
      "{}",
      "3|-4|7.0|3.5|2.0|3|-4|1|2|-2|1024|64|0.5" },
    { "{{ 1.5 + 1 }}|{{ 0.1 + 0.2 }}|{{ 1e100 }}|{{ 1.0e-10 }}|{{ 123456789012345678.0 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ -0.0 }}|{{ 1/3 }}|{{ 2.5 }}|{{ 100.0 }}|{{ 1e16 }}|{{ 1e15 }}",
      "{}",
      "2.5|0.30000000000000004|1e+100|1e-10|1.2345678901234568e+17|0.0001|1e-05|-0.0|0.3333333333333333|2.5|100.0|1e+16|1000000000000000.0" },
    { "{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ 3 * 'x' }}|{{ [1,2] * 2 }}|{{ [1] + [2] }}|{{ (1,) + (2,3) }}",
      "{}",
      "a1NoneTrue|ababab|xxx|[1, 2, 1, 2]|[1, 2]|(1, 2, 3)" },
    { "{{ true }}|{{ True }}|{{ none }}|{{ None }}|{{ false and 1 }}|{{ 0 or 'x' }}|{{ 1 and 2 }}|{{ not 0 }}|{{ '' or [] }}",
      "{}",
      "True|True|None|None|False|x|2|True|[]" },
    { "{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ 'a' < 'b' }}|{{ [1,2] < [1,3] }}|{{ 1 != 2 }}|{{ 'a' in 'cat' }}|{{ 2 in [1,2] }}|{{ 'k' in {'k':1} }}|{{ 3 not in [1] }}",
      "{}",
      "True|False|True|True|True|True|True|True|True|True|True" },
    { "{{ [1, 'a', none, true, 1.5, [2], {'x': (1,)}] }}|{{ (1,) }}|{{ () }}|{{ {} }}|{{ {'a': 'b'} }}",
      "{}",
      "[1, 'a', None, True, 1.5, [2], {'x': (1,)}]|(1,)|()|{}|{'a': 'b'}" },
    { "{{ \"it's\" }}|{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\nx', 'tab\\t', 'bs\\\\', '\xc3\xa9', '\\x01', '\\u2028'] }}",
      "{}",
      "it's|[\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\nx', 'tab\\t', 'bs\\\\', '\xc3\xa9', '\\x01', '\\u2028']" },
    { "{{ x }}|{{ x is defined }}|{{ x is undefined }}|{{ x|default('d') }}|{{ none|default('d') }}|{{ none|default('d', true) }}|{{ ''|d('e', boolean=true) }}",
      "{}",
      "|False|True|d|None|d|e" },
    { "{{ 'Hello World'|upper }}|{{ 'Hello World'|lower }}|{{ 'hello wORLD-foo(bar)'|title }}|{{ 'hello wORLD'|capitalize }}|{{ \"hello wORLD it's\"|title }}",
      "{}",
      "HELLO WORLD|hello world|Hello World-Foo(Bar)|Hello world|Hello World It's" },
    { "{{ '  pad  '|trim }}|{{ 'xxpadxx'|trim('x') }}|{{ '  a b  '.strip() }}|{{ '\\n\\nab\\n'.lstrip('\\n') }}|{{ 'ab  '.rstrip() }}|{{ 'abcba'.strip('a') }}",
      "{}",
      "pad|pad|a b|ab\n|ab|bcb" },
    { "{{ 'a,b,,c'.split(',') }}|{{ ' a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ ' a  b c '.rsplit(None, 1) }}|{{ ''.split(',') }}|{{ ''.split() }}",
      "{}",
      "['a', 'b', '', 'c']|['a', 'b', 'c']|['a', 'b c']|['a,b', 'c']|[' a  b', 'c']|['']|[]" },
    { "{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith(('x','lo')) }}|{{ 'hello'.replace('l', 'L') }}|{{ 'hello'.replace('l', 'L', 1) }}|{{ 'abc'.replace('', '-') }}",
      "{}",
      "True|True|heLLo|heLlo|-a-b-c-" },
    { "{{ 'hello'.find('l') }}|{{ 'hello'.rfind('l') }}|{{ 'hello'.find('z') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['a','b']) }}|{{ 'Hi {}, {name}!'.format('A', name='B') }}",
      "{}",
      "2|3|-1|2|a-b|Hi A, B!" },
    { "{{ 'hello'[1] }}|{{ 'hello'[-1] }}|{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ 'hello'[::2] }}|{{ [1,2,3,4][1:] }}|{{ [1,2,3,4][:-1] }}|{{ [1,2,3,4][::-2] }}|{{ 'h\xc3\xa9llo'[1] }}|{{ 'h\xc3\xa9llo'[::-1] }}|{{ 'h\xc3\xa9llo'|length }}",
      "{}",
      "e|o|el|olleh|hlo|[2, 3, 4]|[1, 2, 3]|[4, 2]|\xc3\xa9|oll\xc3\xa9h|5" },
    { "{{ [3,1,2]|sort }}|{{ [3,1,2]|sort(reverse=true) }}|{{ ['b','A','c']|sort }}|{{ ['b','A','c']|sort(case_sensitive=true) }}|{{ [1,2,2,3,1]|unique|list }}|{{ ['a','A']|unique|list }}",
      "{}",
      "[1, 2, 3]|[3, 2, 1]|['A', 'b', 'c']|['A', 'b', 'c']|[1, 2, 3]|['a']" },
    { "{{ [1,2,3]|first }}|{{ [1,2,3]|last }}|{{ []|first }}|{{ 'abc'|first }}|{{ [1,2,3]|length }}|{{ {'a':1}|length }}|{{ [1,2,3]|sum }}|{{ [1,2,3]|max }}|{{ [1,2,3]|min }}|{{ [1,2,3]|reverse|list }}|{{ 'abc'|reverse }}",
      "{}",
      "1|3||a|3|1|6|3|1|[3, 2, 1]|cba" },
    { "{{ [1,2,3]|join(',') }}|{{ [1,2,3]|join }}|{{ 'abc'|list }}|{{ {'b':1,'a':2}|list }}|{{ {'b':1,'a':2}|dictsort }}|{{ {'b':1,'a':2}|dictsort(by='value') }}|{{ {'b':1,'a':2}|items|list }}",
      "{}",
      "1,2,3|123|['a', 'b', 'c']|['b', 'a']|[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|[('b', 1), ('a', 2)]" },
    { "{{ 42|string }}|{{ '42'|int }}|{{ '4.5'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ '0x1f'|int(0, 16) }}|{{ '3.25'|float }}|{{ 3|float }}|{{ -3|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 3|round }}|{{ 2.1|round(method='ceil') }}|{{ 2.9|round(0, 'floor') }}",
      "{}",
      "42|42|4|0|7|31|3.25|3.0|3|2.0|4.0|2.67|3|3.0|2.0" },
    { "{{ {'a': [1, 'x', {'b': none}], 'c': true, 'd': 1.0}|tojson }}|{{ {'a': 1}|tojson(indent=2) }}|{{ [1,[2,3],{}]|tojson(indent=2) }}|{{ '\xc3\xa9\"\\n'|tojson }}|{{ {'b':1,'a':2}|tojson(sort_keys=true) }}|{{ [1]|tojson(separators=(',',':')) }}|{{ '\xc3\xa9'|tojson(ensure_ascii=true) }}",
      "{}",
      "{\"a\": [1, \"x\", {\"b\": null}], \"c\": true, \"d\": 1.0}|{\n  \"a\": 1\n}|[\n  1,\n  [\n    2,\n    3\n  ],\n  {}\n]|\"\xc3\xa9\\\"\\n\"|{\"a\": 2, \"b\": 1}|[1]|\"\\u00e9\"" },
    { "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'a\\nb'|indent('>') }}|{{ 'one two  three'|wordcount }}|{{ '<a href=\"x\">&'|escape }}|{{ 'x'|safe }}",
      "{}",
      "a\n    b\n\n    c|  a\n  b|a\n  \n  b|a\n>b|3|&lt;a href=&#34;x&#34;&gt;&amp;|x" },
    { "{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ dict(a=1, b=2) }}|{{ namespace(a=1).a }}",
      "{}",
      "[0, 1, 2]|[1, 4, 7]|[5, 3, 1]|{'a': 1, 'b': 2}|1" },
    { "{{ [1,2,3,4]|select('odd')|list }}|{{ [1,2,3,4]|reject('even')|list }}|{{ [1,2,3,4]|select('divisibleby', 2)|list }}|{{ ['a','b']|map('upper')|list }}|{{ [{'n':1},{'n':2}]|map(attribute='n')|list }}|{{ [{'n':1},{'m':2}]|map(attribute='n', default=9)|list }}",
      "{}",
      "[1, 3]|[1, 3]|[2, 4]|['A', 'B']|[1, 2]|[1, 9]" },
    { "{{ [{'r':'u'},{'r':'a'},{'r':'u'}]|selectattr('r', 'equalto', 'u')|list|length }}|{{ [{'r':'u'},{'r':'a'}]|rejectattr('r', 'eq', 'u')|list }}|{{ [{'x':0},{'x':1}]|selectattr('x')|list }}|{{ [{'a':{'b':1}}]|map(attribute='a.b')|list }}",
      "{}",
      "2|[{'r': 'a'}]|[{'x': 1}]|[1]" },
    { "{{ 1 is number }}|{{ 1.0 is integer }}|{{ true is number }}|{{ true is integer }}|{{ true is boolean }}|{{ 'a' is string }}|{{ {} is mapping }}|{{ [] is sequence }}|{{ 'a' is iterable }}|{{ 1 is iterable }}|{{ {} is sequence }}|{{ none is none }}|{{ x is iterable }}|{{ x is sequence }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 'A' is upper }}|{{ 'a' is lower }}|{{ 1 is in [1] }}|{{ 1 is eq 1 }}|{{ 2 is gt 1 }}|{{ false is false }}|{{ 0 is false }}|{{ range is callable }}|{{ 'upper' is filter }}|{{ 'odd' is test }}|{{ none is sameas none }}",
      "{}",
      "True|False|True|False|True|True|True|True|True|False|True|True|True|True|True|True|True|True|True|True|True|True|False|True|True|True|True" },
    { "{% for i in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{% endfor %}",
      "{}",
      "10TrueFalse33221FalseFalse32132FalseTrue310" },
    { "{% for i in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
      "{}",
      "-2;1-3;2-;" },
    { "{% for i in [1,2,3] if i != 2 %}{{ i }}{{ loop.last }}{% endfor %}",
      "{}",
      "1False3True" },
    { "{% for i in [] %}x{% else %}empty{% endfor %}",
      "{}",
      "empty" },
    { "{% for k, v in {'a':1,'b':2}.items() %}{{k}}={{v}},{% endfor %}",
      "{}",
      "a=1,b=2," },
    { "{% for k, v in {'a':1,'b':2}|dictsort %}{{k}}={{v}},{% endfor %}",
      "{}",
      "a=1,b=2," },
    { "{% for a, (b, c) in [(1, (2, 3))] %}{{a}}{{b}}{{c}}{% endfor %}",
      "{}",
      "123" },
    { "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{i}}{% endfor %}",
      "{}",
      "0134" },
    { "{% for i in [1,2] %}{% for j in 'ab' %}{{ loop.index }}{{ j }}{% endfor %}{{ loop.index }}{% endfor %}",
      "{}",
      "1a2b11a2b2" },
    { "{% for i in [1,2,3] %}{{ loop.cycle('a','b') }}{% endfor %}",
      "{}",
      "aba" },
    { "{% for i in [1,1,2] %}{% if loop.changed(i) %}{{i}}{% endif %}{% endfor %}",
      "{}",
      "12" },
    { "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
      "{}",
      "1212121" },
    { "{% set ns = namespace(c=0) %}{% for i in range(3) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}",
      "{}",
      "3" },
    { "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
      "{}",
      "12" },
    { "{% set x %}block {{ 1 }}{% endset %}[{{ x }}]",
      "{}",
      "[block 1]" },
    { "{% set x | upper %}block{% endset %}[{{ x }}]",
      "{}",
      "[BLOCK]" },
    { "{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(b=5, a=4) }}|{{ m() }}",
      "{}",
      "1-2|1-3|4-5|-2" },
    { "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
      "{}",
      "(1, 2){'k': 3}" },
    { "{% macro m(x) %}<{{ caller(x) }}>{% endmacro %}{% call(y) m(5) %}got {{ y }}{% endcall %}",
      "{}",
      "<got 5>" },
    { "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
      "{}",
      "54321" },
    { "{% filter upper %}abc {{ 'd' }}{% endfilter %}",
      "{}",
      "ABC D" },
    { "{% filter trim|upper %}  abc  {% endfilter %}!",
      "{}",
      "ABC!" },
    { "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
      "{}",
      "3[]" },
    { "{% raw %}{{ not rendered }}{% endraw %}",
      "{}",
      "{{ not rendered }}" },
    { "a {# comment #} b",
      "{}",
      "a  b" },
    { "{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}",
      "{}",
      "b" },
    { "{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 }}|{{ 'a' if 0 else 'b' if 0 else 'c' }}",
      "{}",
      "yes||c" },
    { "  {% if true %}\n  x\n  {% endif %}\n  y",
      "{}",
      "  x\n  y" },
    { "a\n{%- if true -%}\n  b  \n{%- endif -%}\n c",
      "{}",
      "abc" },
    { "{%+ if true %}x{% endif %}",
      "{}",
      "x" },
    { "  {{ 'x' }}  {# c #}\n  {% if true %}y{% endif %}\nz",
      "{}",
      "  x  yz" },
    { "{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n",
      "{}",
      "  1\n  2\n" },
    { "line1\n\n",
      "{}",
      "line1\n" },
    { "a\r\nb\rc",
      "{}",
      "a\nb\nc" },
    { "{{ 'a' 'b' }}",
      "{}",
      "ab" },
    { "{{ {}.x }}|{{ {}.x is defined }}",
      "{}",
      "|False" },
    { "{{ [1][5] }}|{{ [1][5] is defined }}",
      "{}",
      "|False" },
    { "{{ none.x }}|{{ 'a'.x }}",
      "{}",
      "|" },
    { "{{ {'items': 1}['items'] }}",
      "{}",
      "1" },
    { "{{ {'a':1}.get('a') }}|{{ {'a':1}.get('b') }}|{{ {'a':1}.get('b', 2) }}|{{ {'a':1}.keys()|list }}|{{ {'a':1}.values()|list }}",
      "{}",
      "1|None|2|['a']|[1]" },
    { "{% set l = [1] %}{{ l.append }}",
      "{}",
      "" },
    { "{{ strftime_now('%Y-%m-%d %H') }}",
      "{}",
      "2023-11-14 22" },
    { "{{ x ~ 'a' }}",
      "{}",
      "a" },
    { "{% if false %}{{ x|nosuchfilter }}{% endif %}ok",
      "{}",
      "ok" },
    { "{{ (1, 2) }}|{{ (1, 2)[0] }}|{{ 1, 2 }}",
      "{}",
      "(1, 2)|1|(1, 2)" },
    { "{{ [1,2,3][0:2] }}|{{ 'hello'[10:] }}|{{ [1,2][5:] }}",
      "{}",
      "[1, 2]||[]" },
    { "{{ 'x' ~ [1, 'a'] }}",
      "{}",
      "x[1, 'a']" },
    { "{{ 'abc'|batch(2)|list }}|{{ [1,2,3,4,5]|batch(2, 0)|list }}|{{ [1,2,3,4,5]|slice(2)|list }}",
      "{}",
      "[['a', 'b'], ['c']]|[[1, 2], [3, 4], [5, 0]]|[[1, 2, 3], [4, 5]]" },
    { "{{ 'abc'|center(9) }}|{{ 'a long sentence here'|truncate(9) }}|{{ 'a long sentence here'|truncate(9, true) }}",
      "{}",
      "   abc   |a...|a long..." },
    { "{{ '%s-%d' % ('a', 3) }}|{{ '%05.1f' % 3.14159 }}|{{ '%s'|format(5) }}",
      "{}",
      "a-3|003.1|5" },
    { "{% set c = cycler('a','b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}",
      "{}",
      "abab" },
    { "{% set j = joiner('|') %}{% for i in [1,2,3] %}{{ j() }}{{ i }}{% endfor %}",
      "{}",
      "1|2|3" },
    { "{{ 1 if x is defined and x.y else 2 }}",
      "{}",
      "2" },
    { "{% for m in messages %}{{ m.role }}{% endfor %}",
      "{}",
      "" },
    { "{{ '\xc3\x9f'|upper }}|{{ '\xc3\x89""COLE'|lower }}|{{ '\xc7\x86'|title }}",
      "{}",
      "SS|\xc3\xa9""cole|\xc7\x84" },
    { "{{ '\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88'[2:4] }}|{{ '\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e'|length }}|{{ '\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e'|reverse }}|{{ '\xf0\x9f\x98\x80x'|list }}",
      "{}",
      "\xe8\xaa\x9e\xe3\x83\x86|3|\xe8\xaa\x9e\xe6\x9c\xac\xe6\x97\xa5|['\xf0\x9f\x98\x80', 'x']" },
    { "{{ 'a\xe3\x80\x80""b'.split() }}|{{ '\xe3\x80\x80""a\xe3\x80\x80'|trim }}",
      "{}",
      "['a', 'b']|a" },
    { "{{ ' '.join(['a', 'b']) }}",
      "{}",
      "a b" },
    { "{{ 1 is divisibleby 3 }}|{{ 'a' is equalto 'a' }}|{{ x is not defined }}",
      "{}",
      "False|True|True" },
    { "{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_000 }}|{{ 1_0.5 }}|{{ 1e3 }}|{{ 2E-2 }}",
      "{}",
      "31|15|5|1000|10.5|1000.0|0.02" },
    { "{{ (1) }}|{{ [] }}|{{ [1,] }}|{{ {'a':1,} }}",
      "{}",
      "1|[]|[1]|{'a': 1}" },
    { "{{ [[1,2]].0.1 }}",
      "{}",
      "2" },
    { "{{ {1: 'a', 1.0: 'b', true: 'c'} }}",
      "{}",
      "{1: 'c'}" },
    { "{{ {'a': 1} == {'a': 1} }}|{{ [1, 2] == [1, 2] }}|{{ (1,) == [1] }}|{{ 'a' == 'a' }}|{{ none == none }}|{{ x == x }}",
      "{}",
      "True|True|False|True|True|True" },
    { "{{ ['b', 'a']|sort|first }}|{{ [{'a': 2}, {'a': 1}]|sort(attribute='a')|map(attribute='a')|list }}",
      "{}",
      "a|[1, 2]" },
    { "{{ [0.5, 1]|sum }}|{{ [{'v':1},{'v':2}]|sum(attribute='v') }}",
      "{}",
      "1.5|3" },
    { "{{ 'abc' is sequence }}|{{ 1 is sequence }}|{{ namespace() is mapping }}|{{ namespace(a=1) }}",
      "{}",
      "True|False|False|<Namespace {'a': 1}>" },
    { "{% set ns = namespace() %}{% set ns.items = [1] %}{{ ns.items }}",
      "{}",
      "[1]" },
    { "{{ loop }}",
      "{}",
      "" },
    { "{% for x in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}",
      "{}",
      "10" },
    { "{% for x in [[1,[2]]] recursive %}{{ x }}{% endfor %}",
      "{}",
      "[1, [2]]" },
    { "{{ {'a': 'b'}|items|list }}",
      "{}",
      "[('a', 'b')]" },
    { "{{ x|items|list }}|{{ x|list }}|{{ x|length }}|{{ x|join }}|{{ x|string }}|{{ x|upper }}|{{ x|trim }}|{{ x|first }}",
      "{}",
      "[]|[]|0|||||" },
    { "{{ [1, 2, 3]|map('string')|join('-') }}|{{ ['1', '2']|map('int')|sum }}",
      "{}",
      "1-2-3|3" },
    { "{{ [1,2,3]|select('>', 1)|list }}|{{ [1,2,3]|select('lt', 3)|list }}|{{ [1,'a',none]|reject('none')|list }}|{{ ['a','',none]|select|list }}",
      "{}",
      "[2, 3]|[1, 2]|[1, 'a']|['a']" },
    { "{{ '{0} {0}'.format('x') }}|{{ '{:>5}'.format('a') }}|{{ '{:.2f}'.format(3.14159) }}|{{ '{!r}'.format('a') }}",
      "{}",
      "x x|    a|3.14|'a'" },
    { "{% macro m(a) %}{{ a }}{% endmacro %}{{ m }}",
      "{}",
      "<Macro 'm'>" },
    { "{{ 'abc'.upper().lower() }}|{{ 'A-B'.split('-')[1] }}|{{ ('a' ~ 'b').upper() }}",
      "{}",
      "abc|B|AB" },
    { "{{ 'x'|replace('x', 'y') }}|{{ 'aaa'|replace('a', 'b', 2) }}",
      "{}",
      "y|bba" },
    { "{{ '  x  '|trim|length }}",
      "{}",
      "1" },
    { "{{ 1.5|int }}|{{ -1.5|int }}|{{ true|int }}|{{ none|int }}|{{ '12abc'|int }}|{{ ' 12 '|int }}|{{ '1_000'|int }}",
      "{}",
      "1|-1|1|0|0|12|1000" },
    { "{{ 'inf'|float }}|{{ 'nan'|float }}|{{ 'x'|float }}|{{ '1e3'|float }}",
      "{}",
      "inf|nan|0.0|1000.0" },
    { "{{ 1e308 * 10 }}|{{ -1e308 * 10 }}",
      "{}",
      "inf|-inf" },
    { "{{ [1,2,3] | join(', ') }} {{ [1,2] | list | length }}",
      "{}",
      "1, 2, 3 2" },
    { "{{ 'a' if true else 'b' | upper }}",
      "{}",
      "a" },
    { "{{ 'abc' | upper if true }}",
      "{}",
      "ABC" },
    { "{{ -2 ** 2 }}|{{ (-2) ** 2 }}|{{ 2 ** 0.5 }}",
      "{}",
      "4|4|1.4142135623730951" },
    { "{{ not 1 == 2 }}|{{ not 'a' in 'abc' }}|{{ 'a' not in 'abc' }}",
      "{}",
      "True|False|False" },
    { "{{ 1 is not none and 2 }}",
      "{}",
      "2" },
    { "{{ 3 is divisibleby(3) }}",
      "{}",
      "True" },
    { "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}",
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": null}]}",
      "user:hi;assistant:None;" },
    { "{{ messages|tojson }}",
      "{\"messages\": [{\"role\": \"user\", \"content\": \"h\\u00e9\\\"\\u2028\\u0001\"}, {\"n\": 1.5, \"i\": 10, \"b\": true, \"z\": null, \"e\": [], \"o\": {}}]}",
      "[{\"role\": \"user\", \"content\": \"h\xc3\xa9\\\"\xe2\x80\xa8\\u0001\"}, {\"n\": 1.5, \"i\": 10, \"b\": true, \"z\": null, \"e\": [], \"o\": {}}]" },
    { "{{ messages }}",
      "{\"messages\": [{\"role\": \"user\", \"content\": \"it's\"}, 1.0, -0.0, 1e-07, 1.2345678901234567e+19]}",
      "[{'role': 'user', 'content': \"it's\"}, 1.0, -0.0, 1e-07, 1.2345678901234567e+19]" },
    { "{{ tools|tojson(indent=4) }}",
      "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}}]}",
      "[\n    {\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": \"f\",\n            \"parameters\": {\n                \"a\": [\n                    1,\n                    2\n                ]\n            }\n        }\n    }\n]" },
    { "{{ x.content is string }}{{ x.content.content is defined }}",
      "{\"x\": {\"content\": \"s\"}}",
      "TrueFalse" },
    { "{{ x['a'] }}{{ x.a }}{{ x['b'] }}",
      "{\"x\": {\"a\": 1}}",
      "11" },
    { "{% for k in x %}{{ k }}{% endfor %}{{ x|length }}",
      "{\"x\": {\"b\": 1, \"a\": 2}}",
      "ba2" },
    { "{{ x|string }}",
      "{\"x\": {\"a\": [1, \"b\", null, true]}}",
      "{'a': [1, 'b', None, True]}" },
    { "{{ x['tool_calls'] is defined }}{{ 'tool_calls' in x }}",
      "{\"x\": {\"role\": \"a\"}}",
      "FalseFalse" },
    { "{{ 'a\\tb\\\\n\\x41\\u00e9\\U0001F600\\101\\'\\\"' }}",
      "{}",
      "a\tb\\nA\xc3\xa9\xf0\x9f\x98\x80""A'\"" },
    { "{{ 'back\\slash \\d' }}",
      "{}",
      "back\\slash \\d" },
    { "{{ '\xc3\xa9\\\xc3\xa9' }}",
      "{}",
      "\xc3\xa9\\xe9" },
    { "{{ '\\\xe4\xb8\xad' }}",
      "{}",
      "\\u4e2d" },
    { "{{ 'line\\\ncont' }}",
      "{}",
      "linecont" },
    { "{{ \"multi\nline\" }}",
      "{}",
      "multi\nline" },
    { "{% set x = {'a': 1, 2: 'b', 1.5: 'c', true: 'd', none: 'e'} %}{{ x|tojson }}",
      "{}",
      "{\"a\": 1, \"2\": \"b\", \"1.5\": \"c\", \"true\": \"d\", \"null\": \"e\"}" },
    { "{{ {'b': 1, 'a': {'d': 1, 'c': 2}}|tojson(sort_keys=true, indent=1) }}",
      "{}",
      "{\n \"a\": {\n  \"c\": 2,\n  \"d\": 1\n },\n \"b\": 1\n}" },
    { "{{ [1.0, 1e20, 1e-20, -5, 3.14]|tojson }}",
      "{}",
      "[1.0, 1e+20, 1e-20, -5, 3.14]" },
    { "{{ {'k': [1, {'z': []}]}|tojson(indent='\t') }}",
      "{}",
      "{\n\t\"k\": [\n\t\t1,\n\t\t{\n\t\t\t\"z\": []\n\t\t}\n\t]\n}" },
    { "{{ {'k': 1}|tojson(indent=0) }}",
      "{}",
      "{\n\"k\": 1\n}" },
    { "{{ 'abc'|tojson }}|{{ none|tojson }}|{{ true|tojson }}|{{ (1, 2)|tojson }}",
      "{}",
      "\"abc\"|null|true|[1, 2]" },
    { "{{ '\\u0000\\u001f\\u007f\\u0080'|tojson }}",
      "{}",
      "\"\\u0000\\u001f\x7f\xc2\x80\"" },
    { "{{ '\\u0000\\u001f\\u007f\\u0080'|tojson(ensure_ascii=true) }}",
      "{}",
      "\"\\u0000\\u001f\\u007f\\u0080\"" },
    { "{{ 'x\\u2028y'|tojson }}",
      "{}",
      "\"x\xe2\x80\xa8y\"" },
    { "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{% for x in [2] %}{{ m() }}{% endfor %}",
      "{}",
      "11" },
    { "{% for i in [1] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}",
      "{}",
      "1" },
    { "{% macro outer() %}{% macro inner() %}in{% endmacro %}{{ inner() }}{% endmacro %}{{ outer() }}",
      "{}",
      "in" },
    { "{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(*[1, 2]) }}|{{ m(**{'a': 3, 'b': 4}) }}",
      "{}",
      "1|12|34" },
    { "{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}body{% endcall %}",
      "{}",
      "[body]" },
    { "{% macro m(x) %}{{ x }}{% endmacro %}{% set r = m('a') %}{{ r|length }}{{ r is string }}",
      "{}",
      "1True" },
    { "{% set ns = namespace(v=[]) %}{% set ns.v = ns.v + [1] %}{% set ns.v = ns.v + [2] %}{{ ns.v }}",
      "{}",
      "[1, 2]" },
    { "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}{{ ns.c is defined }}",
      "{}",
      "121False" },
    { "{% set ns = namespace() %}{% for i in [1,2] %}{% set ns.last = i %}{% endfor %}{{ ns.last }}",
      "{}",
      "2" },
    { "{% if true %}{% set y = 5 %}{% endif %}{{ y }}",
      "{}",
      "5" },
    { "{% for i in [1,2] %}{% set y = i %}{% endfor %}[{{ y }}]",
      "{}",
      "[]" },
    { "{% set y = 0 %}{% for i in [1,2] %}{% set y = y + i %}{{ y }}{% endfor %}[{{ y }}]",
      "{}",
      "12[0]" },
    { "{% for a in [1,2] %}{% for b in [3] %}{{ loop.index }}{{ a }}{% endfor %}{{ loop.index }}{% endfor %}",
      "{}",
      "111122" },
    { "{% for i in [1,2,3] %}{% if loop.first %}F{% elif loop.last %}L{% else %}M{% endif %}{% endfor %}",
      "{}",
      "FML" },
    { "{% for x in 'ab' %}{{ x }}{{ loop.length }}{% endfor %}",
      "{}",
      "a2b2" },
    { "{% for x in {'b':1, 'a':2} %}{{ x }}{% endfor %}",
      "{}",
      "ba" },
    { "{% for k, v in [('a', 1), ('b', 2)] %}{{ k }}{{ v }}{% endfor %}",
      "{}",
      "a1b2" },
    { "{% for k, v in ['ab', 'cd'] %}{{ k }}{{ v }}{% endfor %}",
      "{}",
      "abcd" },
    { "{% for k in [1, 2, 3] %}{{ loop.revindex }}{% if loop.index is divisibleby 2 %}!{% endif %}{% endfor %}",
      "{}",
      "32!1" },
    { "{% for x in [3, 1, 2]|sort %}{{ x }}{% else %}none{% endfor %}",
      "{}",
      "123" },
    { "{% for x in range(3) if x > 5 %}{{ x }}{% else %}none{% endfor %}",
      "{}",
      "none" },
    { "{{ [1, 2, 3]|batch(2)|map('sum')|list }}",
      "{}",
      "[3, 3]" },
    { "{{ 'a b c'|wordcount }}|{{ 'hello_world foo-bar'|wordcount }}",
      "{}",
      "3|3" },
    { "{{ 'Hello'|center(10)|length }}",
      "{}",
      "10" },
    { "{{ '  '|trim == '' }}|{{ 'x'|trim('') }}",
      "{}",
      "True|x" },
    { "{{ [] is iterable }}|{{ {} is iterable }}|{{ none is iterable }}|{{ 1.5 is float }}|{{ 1 is float }}",
      "{}",
      "True|True|False|True|False" },
    { "{{ 'a' ~ none }}|{{ none ~ 'a' }}|{{ 1 ~ 2.0 }}",
      "{}",
      "aNone|Nonea|12.0" },
    { "{{ 10 / 4 }}|{{ 10 // 4.0 }}|{{ 10 % 4.5 }}|{{ -10 % 4.5 }}|{{ 2 ** 0 }}|{{ 0 ** 0 }}|{{ 10 / -4 }}|{{ 1e300 * 1e300 }}",
      "{}",
      "2.5|2.0|1.0|3.5|1|1|-2.5|inf" },
    { "{{ 9007199254740993 / 1 }}|{{ 7 / 7 }}|{{ 1 / 3 * 3 }}",
      "{}",
      "9007199254740992.0|1.0|1.0" },
    { "{{ 1.1 + 2.2 }}|{{ 3.3 * 3 }}|{{ 1.23456789012345e-7 }}|{{ 123456789.123456789 }}|{{ 5e-324 }}|{{ 1.7976931348623157e308 }}",
      "{}",
      "3.3000000000000003|9.899999999999999|1.23456789012345e-07|123456789.12345679|5e-324|1.7976931348623157e+308" },
    { "{{ 'abc'.title() }}|{{ 'ABC def'.capitalize() }}|{{ 'hello world'.title() }}|{{ \"they're bill's\".title() }}|{{ 'a1b2'.title() }}",
      "{}",
      "Abc|Abc def|Hello World|They'Re Bill'S|A1B2" },
    { "{{ 'Ab'.isupper() }}|{{ 'AB'.isupper() }}|{{ 'ab1'.islower() }}|{{ '123'.isdigit() }}|{{ 'abc'.isalpha() }}|{{ ' '.isspace() }}|{{ ''.isalnum() }}",
      "{}",
      "False|True|True|True|True|True|False" },
    { "{{ 'abc'.center(7, '*') }}|{{ 'abc'.ljust(5) }}.|{{ 'abc'.rjust(5, '0') }}|{{ 'ab'.center(5) }}.|{{ 'abc'.center(6) }}.",
      "{}",
      "**abc**|abc  .|00abc|  ab .| abc  ." },
    { "{{ 'a-b-c'.split('-', maxsplit=1) }}|{{ 'a  b'.split(' ') }}|{{ 'a\\nb\\r\\nc'.splitlines() }}",
      "{}",
      "['a', 'b-c']|['a', '', 'b']|['a', 'b', 'c']" },
    { "{{ 'hello'.startswith('') }}|{{ 'hello'.endswith('') }}|{{ ''.startswith('a') }}",
      "{}",
      "True|True|False" },
    { "{{ 'abcabc'.index('c') }}|{{ 'abcabc'.rindex('c') }}|{{ 'abcabc'.find('c', 3) }}|{{ 'abcabc'.find('c', -2) }}|{{ 'h\xc3\xa9llo'.find('l') }}",
      "{}",
      "2|5|5|5|2" },
    { "{{ 'hello'.removeprefix('he') }}|{{ 'hello'.removesuffix('lo') }}",
      "{}",
      "llo|hel" },
    { "{{ [1, 2, 1].count(1) }}|{{ [1, 2, 1].index(2) }}|{{ (1, 2).count(2) }}",
      "{}",
      "2|1|1" },
    { "{{ {'a': 1}.copy() }}|{{ [1].copy() }}",
      "{}",
      "{'a': 1}|[1]" },
    { "{{ {'a': 1}.update }}",
      "{}",
      "" },
    { "{% set d = {'a': 1} %}{{ d.items()|list }}|{{ d|dictsort(true) }}",
      "{}",
      "[('a', 1)]|[('a', 1)]" },
    { "{{ {'B': 1, 'a': 2}|dictsort }}|{{ {'B': 1, 'a': 2}|dictsort(case_sensitive=true) }}|{{ {'b': 2, 'a': 1}|dictsort(reverse=true) }}",
      "{}",
      "[('a', 2), ('B', 1)]|[('B', 1), ('a', 2)]|[('b', 2), ('a', 1)]" },
    { "{{ [{'a': 'B'}, {'a': 'a'}]|sort(attribute='a')|list }}|{{ ['b', 'a', 'C']|sort(reverse=true) }}",
      "{}",
      "[{'a': 'a'}, {'a': 'B'}]|['C', 'b', 'a']" },
    { "{{ ['a', 'B', 'c']|max }}|{{ ['a', 'B', 'c']|min }}|{{ ['a', 'B', 'c']|max(case_sensitive=true) }}|{{ []|max }}",
      "{}",
      "c|a|c|" },
    { "{{ ['b', 'a', 'B']|unique|list }}|{{ ['b', 'a', 'B']|unique(case_sensitive=true)|list }}",
      "{}",
      "['b', 'a']|['b', 'a', 'B']" },
    { "{{ [{'n': 'x'}, {'n': 'X'}]|unique(attribute='n')|list }}",
      "{}",
      "[{'n': 'x'}]" },
    { "{{ 'abc'|first }}{{ 'abc'|last }}|{{ {'a': 1, 'b': 2}|first }}|{{ {'a': 1, 'b': 2}|last }}",
      "{}",
      "ac|a|b" },
    { "{{ 5|string ~ 'x' }}|{{ [1,'a']|string }}|{{ none|string }}",
      "{}",
      "5x|[1, 'a']|None" },
    { "{{ 'a'|attr('upper')() }}|{{ {'a': 1}|attr('a') }}",
      "{}",
      "A|" },
    { "{{ [1, none, 2]|select('none')|list }}|{{ [1, 'a']|select('string')|list }}|{{ [1, 'a']|reject('number')|list }}",
      "{}",
      "[None]|['a']|['a']" },
    { "{{ ['a', 'b']|map('upper')|join }}|{{ ['a', 'b']|map('replace', 'a', 'x')|list }}",
      "{}",
      "AB|['x', 'b']" },
    { "{{ [{'r': 'a'}, {'x': 1}]|selectattr('r', 'defined')|list }}|{{ [{'r': 'a'}, {'x': 1}]|selectattr('r', 'undefined')|list }}",
      "{}",
      "[{'r': 'a'}]|[{'x': 1}]" },
    { "{{ [{'r': 'a'}, {'x': 1}]|selectattr('r', 'equalto', 'a')|list }}",
      "{}",
      "[{'r': 'a'}]" },
    { "{{ [{'r': {'s': 1}}]|selectattr('r.s', 'eq', 1)|list }}|{{ [[0, 1]]|map(attribute='1')|list }}",
      "{}",
      "[{'r': {'s': 1}}]|[1]" },
    { "{{ 'x' if none else 'y' }}|{{ none if none }}|{{ [] if [] else {} }}",
      "{}",
      "y||{}" },
    { "{{ undefined_thing if false else 'ok' }}",
      "{}",
      "ok" },
    { "{{ a.b if a is defined else 'n' }}",
      "{}",
      "n" },
    { "{{ 'abc'[1:] }}|{{ 'abc'[:1] }}|{{ 'abc'[-2:] }}|{{ 'abc'[5:] }}|{{ 'abc'[-10:2] }}|{{ 'abc'[::-1][1:] }}|{{ [1,2,3][::] }}|{{ [1,2,3][1::-1] }}",
      "{}",
      "bc|a|bc||ab|ba|[1, 2, 3]|[2, 1]" },
    { "{{ 'abc'['x':] }}",
      "{}",
      "" },
    { "{{ {'a': 1}[0:1] }}",
      "{}",
      "" },
    { "{{ [1, 2, 3][-1] }}|{{ [1, 2, 3][-4] }}|{{ 'abc'[true] }}|{{ [1][1.0] }}",
      "{}",
      "3||b|" },
    { "{{ 'abc' < 'abd' }}|{{ 'B' < 'a' }}|{{ '\xc3\xa9' > 'z' }}|{{ [1, 'a'] < [1, 'b'] }}|{{ (1, 2) < (1, 2, 0) }}",
      "{}",
      "True|True|True|True|True" },
    { "{{ x == none }}|{{ x != 1 }}|{{ x in [1] }}|{{ 1 in x }}",
      "{}",
      "False|True|False|False" },
    { "{{ none in [none] }}|{{ 1.0 in [1] }}|{{ true in [1] }}|{{ [1] in [[1]] }}|{{ 'a' in ['a'] }}",
      "{}",
      "True|True|True|True|True" },
    { "{{ {'a': 1} == {'a': 1.0} }}|{{ (1, 2) == (1, 2) }}|{{ [1] == (1,) }}",
      "{}",
      "True|True|False" },
    { "{{ 'ab' * -1 }}|{{ [1] * 0 }}|{{ true + true }}|{{ true * 3 }}|{{ -true }}",
      "{}",
      "|[]|2|3|-1" },
    { "{{ 7 // -2 }}|{{ -7 // -2 }}|{{ 7.5 // 2 }}|{{ -7.5 // 2 }}|{{ 7 % -2.5 }}|{{ 0.0 % 5 }}|{{ -0.0 % 5 }}",
      "{}",
      "-4|3|3.0|-4.0|-0.5|0.0|0.0" },
    { "{{ -9223372036854775807 - 1 }}",
      "{}",
      "-9223372036854775808" },
    { "{{ dict(a=1) }}|{{ dict({'a': 1}, b=2) }}|{{ dict([('x', 1)]) }}|{{ dict() }}",
      "{}",
      "{'a': 1}|{'a': 1, 'b': 2}|{'x': 1}|{}" },
    { "{{ range(0) }}|{{ range(3)|length }}|{{ range(3)|sum }}|{{ range(-3)|list }}|{{ range(10, 0, -3)|list }}",
      "{}",
      "range(0, 0)|3|3|[]|[10, 7, 4, 1]" },
    { "{{ strftime_now('%d %B %Y') }}|{{ strftime_now('%A %j %%') }}|{{ strftime_now('') }}",
      "{}",
      "14 November 2023|Tuesday 318 %|" },
    { "{% set c = cycler(1, 2) %}{{ c.next() }}{% set _ = c.reset() %}{{ c.next() }}{{ c.next() }}{{ c.current }}",
      "{}",
      "1121" },
    { "{% set j = joiner() %}{{ j() }}{{ j() }}{{ j() }}",
      "{}",
      ", , " },
    { "{{ varargs }}",
      "{}",
      "" },
    { "{{ caller }}",
      "{}",
      "" },
    { "{{ 'x' is filter }}",
      "{}",
      "False" },
    { "{{ loop is defined }}",
      "{}",
      "False" },
    { "{% for x in [1] %}{{ loop is iterable }}{{ loop is callable }}{{ loop is mapping }}{{ loop.index is number }}{% endfor %}",
      "{}",
      "TrueTrueFalseTrue" },
    { "{% for x in [[1, 2], [3]] recursive %}{% if x is iterable %}[{{ loop(x) }}]{% else %}{{ x }}{{ loop.depth }}{% endif %}{% endfor %}",
      "{}",
      "[1222][32]" },
    { "{% set a = [1] %}{% set b = a %}{{ a is sameas b }}|{{ [1] is sameas [1] }}|{{ 1 is sameas 1 }}|{{ true is sameas true }}",
      "{}",
      "True|False|True|True" },
    { "{{ 'aaa'|replace('a', 'b', 0) }}|{{ 'aaa'|replace('', '-', 2) }}",
      "{}",
      "aaa|-a-aa" },
    { "{{ 'a\nb'|indent(first=true) }}|{{ ''|indent }}|{{ 'a\n'|indent }}|{{ 'a\n\n'|indent(blank=true) }}",
      "{}",
      "    a\n    b||a\n|a\n    \n    " },
    { "{{ 'Hello World'|truncate(5) }}|{{ 'Hello World'|truncate(11) }}|{{ 'Hello World Foo Bar'|truncate(12, leeway=0) }}|{{ 'HelloWorldFooBar'|truncate(9, leeway=0) }}",
      "{}",
      "He...|Hello World|Hello...|HelloW..." },
    { "{{ 'hello world'|title }}|{{ 'hello   world'|title }}|{{ 'o\\'neil'|title }}|{{ 'x[y]'|title }}|{{ 'AB-CD'|title }}",
      "{}",
      "Hello World|Hello   World|O'neil|X[Y]|Ab-Cd" },
    { "{{ '%s and %s' % ('a', 'b') }}|{{ '%d%%' % 50 }}|{{ '%.2f' % 1.005 }}|{{ '%5s|%-5s|' % ('a', 'b') }}|{{ '%r' % 'x' }}|{{ '%x' % 255 }}|{{ '%s' % [1, 2] }}",
      "{}",
      "a and b|50%|1.00|    a|b    ||'x'|ff|[1, 2]" },
    { "{{ '{0:>4}|{1:<4}|{2:^5}|{3:*^7}'.format(1, 'ab', 'c', 'mid') }}",
      "{}",
      "   1|ab  |  c  |**mid**" },
    { "{{ '{:d}'.format(5) }}|{{ '{:5d}'.format(5) }}|{{ '{:%}'.format(0.25) }}|{{ '{:.1%}'.format(0.25) }}",
      "{}",
      "5|    5|25.000000%|25.0%" },
    { "{{ 'x' is in 'xyz' }}|{{ 1 is in [1,2] }}|{{ 1 is ne 2 }}|{{ 2 is ge 2 }}|{{ 1 is lessthan 2 }}",
      "{}",
      "True|True|True|True|True" },
    { "{{ 3.0 is odd }}|{{ 4.0 is even }}|{{ 3.5 is odd }}",
      "{}",
      "True|True|False" },
    { "{% if x %}{{ x|nope }}{% endif %}ok",
      "{}",
      "ok" },
    { "{{ x|nope if x }}",
      "{}",
      "" },
    { "{% set f = 'upper' %}{{ 'a'|map(f)|list }}",
      "{}",
      "['A']" },
    { "{{ 1|nope2(1) if false else 2 }}",
      "{}",
      "2" },
    { "{{ {'a': 1}.a }}{{ {'a': {'b': 2}}['a'].b }}{{ {'a': [5]}.a.0 }}",
      "{}",
      "125" },
    { "{{ 'x'|length }}{{ 'x'|count }}",
      "{}",
      "11" },
    { "{{ ['a', ['b']]|join(', ') }}",
      "{}",
      "a, ['b']" },
    { "{{ [1, 2]|join(attribute='x') }}",
      "{}",
      "" },
    { "{{ [{'x': 1}, {'x': 2}]|join(',', attribute='x') }}",
      "{}",
      "1,2" },
    { "{{ [{'x': 1}]|map(attribute='y')|list }}",
      "{}",
      "[Undefined]" },
    { "{{ [{'x': 1}]|map(attribute='y')|join }}",
      "{}",
      "" },
    { "{{ [1, 2, 3]|slice(2)|list }}|{{ [1, 2, 3, 4]|slice(3, 'x')|list }}",
      "{}",
      "[[1, 2], [3]]|[[1, 2], [3, 'x'], [4, 'x']]" },
    { "{{ ['a', 'b']|batch(3, '-')|list }}",
      "{}",
      "[['a', 'b', '-']]" },
    { "{{ 'ABC'|lower|reverse|upper }}",
      "{}",
      "CBA" },
    { "{{ '  hello  '|trim|capitalize|center(11)|replace(' ', '.') }}",
      "{}",
      "...Hello..." },
    { "{{ {'a': [1, 2]}|items|map('last')|list }}",
      "{}",
      "[[1, 2]]" },
    { "{{ 'abc'|pprint }}|{{ [1]|pprint }}",
      "{}",
      "'abc'|[1]" },
    { "{{ 3.7|int }}|{{ -0.5|round }}|{{ 0.5|round }}|{{ 1.5|round }}|{{ -1.5|round }}|{{ 12345|round(-2) }}|{{ 1234.5|round(-2) }}",
      "{}",
      "3|-0.0|0.0|2.0|-2.0|12300|1200.0" },
    { "{{ 'x'|float(1.5) }}|{{ 'x'|float('d') }}|{{ ' 1.5 '|float }}|{{ '1_0.5'|float }}",
      "{}",
      "1.5|d|1.5|10.5" },
    { "{{ '0b11'|int(0, 0) }}|{{ '0o17'|int(base=8) }}|{{ 'ff'|int(base=16) }}|{{ '  -12  '|int }}|{{ '+5'|int }}|{{ '1e2'|int }}",
      "{}",
      "3|15|255|-12|5|100" },
    { "{{ 'a'|default }}|{{ x|default }}|{{ x|default(none) }}|{{ false|default('d', true) }}",
      "{}",
      "a||None|d" },
    { "{{ '\xc3\xa9'|escape }}|{{ '<>&\"\\''|e }}|{{ 5|e }}|{{ none|escape }}",
      "{}",
      "\xc3\xa9|&lt;&gt;&amp;&#34;&#39;|5|None" },
    { "{{ x|safe }}|{{ 5|safe }}",
      "{}",
      "|5" },
    { "{{ 'a' ~ 'b' ~ 'c' is string }}",
      "{}",
      "abTrue" },
    { "{{ 1 if 1 }}{{ 2 if 0 }}",
      "{}",
      "1" },
    { "{{ [1, 2, 3]|reverse|first }}|{{ (1, 2)|reverse|list }}|{{ 'ab'|reverse|list }}",
      "{}",
      "3|[2, 1]|['b', 'a']" },
    { "{{ {'a': 1}|reverse|list }}",
      "{}",
      "['a']" },
    { "{% set x = (1, 2) %}{{ x[0] }}{{ x|length }}{{ x|list }}{{ x + (3,) }}",
      "{}",
      "12[1, 2](1, 2, 3)" },
    { "{% set a = 1 %}{% set b = 2 %}{% set a, b = b, a %}{{ a }}{{ b }}",
      "{}",
      "21" },
    { "{% set x = [] %}{{ x|first is defined }}",
      "{}",
      "False" },
    { "{% set x = none %}{{ x.y }}|{{ x['y'] }}",
      "{}",
      "|" },
    { "{{ 'a'['x'] }}",
      "{}",
      "" },
    { "{{ 5.x }}",
      "{}",
      "" },
    { "{{ [1,2][0] is number }}",
      "{}",
      "True" },
    { "{%- for m in messages -%}\n{{- m -}}\n{%- endfor -%}",
      "{}",
      "" },
    { "{%- macro m() -%}\n  x\n{%- endmacro -%}\n[{{ m() }}]",
      "{}",
      "[x]" },
    { "{% block b %}blk{% endblock %}",
      "{}",
      "blk" },
    { "{{ {'a': 1, 'a': 2} }}",
      "{}",
      "{'a': 2}" },
    { "{{ ''.__class__ }}",
      "{}",
      "" },
    { "{{ messages[0]['content']|trim }}",
      "{\"messages\": [{\"content\": \"\\u00a0 hi \\u2003\\n\"}]}",
      "hi" },
    { "{{ s.split() }}|{{ s.strip() }}|{{ s|wordcount }}",
      "{\"s\": \"\\u200b a\\u00a0b\\u3000c \\u0085\"}",
      "['\\u200b', 'a', 'b', 'c']|\xe2\x80\x8b a\xc2\xa0""b\xe3\x80\x80""c|3" },
    { "{{ s|tojson }}",
      "{\"s\": \"\\ud83d\\ude00 emoji\"}",
      "\"\xf0\x9f\x98\x80 emoji\"" },
    { "{{ s|tojson(ensure_ascii=true) }}",
      "{\"s\": \"\\ud83d\\ude00 \\u00e9\"}",
      "\"\\ud83d\\ude00 \\u00e9\"" },
    { "{{ d|tojson }}|{{ d }}",
      "{\"d\": {\"\": 1, \"a b\": [true, false, null]}}",
      "{\"\": 1, \"a b\": [true, false, null]}|{'': 1, 'a b': [True, False, None]}" },
    { "{{ n }}|{{ n|tojson }}|{{ n * 2 }}|{{ n|round }}",
      "{\"n\": 2.0}",
      "2.0|2.0|4.0|2.0" },
    { "{{ big }}|{{ big|tojson }}",
      "{\"big\": 9223372036854775807}",
      "9223372036854775807|9223372036854775807" },
    { "{{ f }}|{{ f|tojson }}",
      "{\"f\": 1e-05}",
      "1e-05|1e-05" },
    { "{% for t in tools %}{{ t.function.name }}{% endfor %}{{ tools|length }}",
      "{\"tools\": [{\"function\": {\"name\": \"a\"}}, {\"function\": {\"name\": \"b\"}}]}",
      "ab2" },
    { "{{ tools }}",
      "{\"tools\": null}",
      "None" },
    { "{% if []|select('odd') %}truthy{% endif %}",
      "{}",
      "truthy" },
    { "{{ [1,2]|map('string')|join(',') }}|{{ ([1,2]|map('string'))|list }}",
      "{}",
      "1,2|['1', '2']" },
    { "{% set g = [1,2,3]|select('odd') %}{{ g|list }}{{ g|list }}",
      "{}",
      "[1, 3][]" },
    { "{% set g = [1,2,3]|select('odd') %}{{ g|first }}{{ g|list }}",
      "{}",
      "1[3]" },
    { "{% set g = [1,2,3]|select('odd') %}{{ 1 in g }}{{ g|list }}",
      "{}",
      "True[3]" },
    { "{% set g = [1,2,3]|map('string') %}{% for x in g %}{{ x }}{% endfor %}{% for x in g %}{{ x }}{% endfor %}",
      "{}",
      "123" },
    { "{{ {'a': 1}.items() }}|{{ {'a': 1}.keys() }}|{{ {'a': 1}.values() }}|{{ {'a': 1}.items()|length }}|{{ {'a': 1}.keys()|list }}",
      "{}",
      "dict_items([('a', 1)])|dict_keys(['a'])|dict_values([1])|1|['a']" },
    { "{{ {'a': 1}|items|list }}|{{ ({'a': 1}|items|list)[0][1] }}",
      "{}",
      "[('a', 1)]|1" },
    { "{{ 'a' in {'a': 1}.keys() }}|{{ 1 in {'a': 1}.values() }}|{{ ('a', 1) in {'a': 1}.items() }}",
      "{}",
      "True|True|True" },
    { "{{ {'a': 1}.keys()[0] }}",
      "{}",
      "" },
    { "{{ range(3) }}|{{ range(1, 5, 2) }}|{{ range(3)[1] }}|{{ range(3)|length }}|{{ 2 in range(3) }}|{{ range(3) is sequence }}",
      "{}",
      "range(0, 3)|range(1, 5, 2)|1|3|True|True" },
    { "{{ [1,2,3]|reverse|list }}|{{ [1,2,3]|reverse|join }}|{{ ([1,2,3]|map('string'))|reverse }}",
      "{}",
      "[3, 2, 1]|321|['3', '2', '1']" },
    { "{{ none|select('odd')|list }}|{{ none|map('upper')|list }}|{{ none|selectattr('a')|list }}|{{ 0|reject|list }}",
      "{}",
      "[]|[]|[]|[]" },
    { "{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}{{ v }}{% endfor %}",
      "{}",
      "a1b2" },
    { "{% for k, v in {'a': 1}.items() %}{{ loop.length }}{{ k }}{{ v }}{% endfor %}",
      "{}",
      "1a1" },
    { "{% for x in [3,1,2]|select('odd') %}{{ loop.index }}/{{ loop.length }}{{ loop.last }} {% endfor %}",
      "{}",
      "1/2False 2/2True " },
    { "{{ [{'a': 1}, {'a': 2}]|map(attribute='a')|sum }}|{{ [{'a': 1}]|selectattr('a')|first }}",
      "{}",
      "3|{'a': 1}" },
    { "{{ [1, 2]|select('odd') is iterable }}|{{ [1, 2]|select('odd') is sequence }}|{{ {'a':1}.items() is sequence }}|{{ range(2) is iterable }}",
      "{}",
      "True|False|False|True" },
    { "{{ ['b', 'a']|map('upper')|sort }}|{{ ['b', 'a']|map('upper')|max }}",
      "{}",
      "['A', 'B']|B" },
    { "{{ namespace(a=[1,2]|map('string')|list) }}",
      "{}",
      "<Namespace {'a': ['1', '2']}>" },
    { "{{ 'Use '|safe + '<b>' + '</b>' }}|{{ ('<'|e) + '<' }}|{{ '<'|e ~ '<' }}|{{ '&'|safe|length }}",
      "{}",
      "Use &lt;b&gt;&lt;/b&gt;|&lt;&lt;|&lt;<|1" },
    { "{{ '\"q\"'|safe + {'k': 'v'}|tojson }}",
      "{}",
      "\"q\"{&#34;k&#34;: &#34;v&#34;}" },
    { "{% macro m() %}<{% endmacro %}{{ m() + '<'|safe }}",
      "{}",
      "&lt;<" },
    { "{% set x %}<{% endset %}{{ x + '<'|safe }}",
      "{}",
      "&lt;<" },
    { "{{ ('<a>'|safe).replace('a', 'b') + '<' }}|{{ ('<a>'|safe)|replace('a', 'b') + '<' }}|{{ ('x'|safe)|title + '<' }}|{{ ('x'|safe)|center(3) + '<' }}",
      "{}",
      "<b>&lt;|<b><|X<| x &lt;" },
    { "{{ ('<'|safe)|indent + '<' }}|{{ ('<'|safe)|string + '<' }}|{{ ('<'|safe)|default('') + '<' }}",
      "{}",
      "<&lt;|<&lt;|<&lt;" },
    { "{{ ['<', '>']|join|safe + '&' }}|{{ ('<'|safe, '>')|join + '&' }}",
      "{}",
      "<>&amp;|<>&" },
    { "{{ '%s'|safe % '<' }}",
      "{}",
      "&lt;" },
    { "{{ ('<'|safe)[0] + '<' }}",
      "{}",
      "<&lt;" },
    { "{{ 'a<'|safe + '<b>' }}|{{ '<a>' + 'b'|safe }}|{{ ('x'|safe + 1|string) }}|{{ '<'|escape|escape }}|{{ '<'|forceescape|forceescape }}|{{ ('<'|safe).upper() + '<' }}|{{ ('<'|safe)|trim + '<' }}|{{ ('<'|safe) ~ '<' }}|{{ ('<'|safe|string) + '>' }}|{{ ('<'|safe|replace('<','>')) + '>' }}|{{ ('a'|safe) * 2 + '<' }}|{{ ('<'|safe) == '<' }}",
      "{}",
      "a<&lt;b&gt;|&lt;a&gt;b|x1|&lt;|&amp;lt;|<&lt;|<&lt;|<<|<&gt;|>>|aa&lt;|True" },
};

/* Python raised an error whose message contains `want`. */
static const tcase k_errors[] = {
    { "{{ x.y }}", "{}", "'x' is undefined" },
    { "{{ x.y.z }}", "{}", "'x' is undefined" },
    { "{{ {}.x.y }}", "{}", "'dict object' has no attribute 'x'" },
    { "{{ [1].append(2) }}", "{}", "access to attribute 'append' of 'list' object is unsafe." },
    { "{{ raise_exception('boom') }}", "{}", "boom" },
    { "{{ 1 + 'a' }}", "{}", "unsupported operand type(s) for +: 'int' and 'str'" },
    { "{{ 'a' + 1 }}", "{}", "can only concatenate str (not \"int\") to str" },
    { "{{ undefined_fn() }}", "{}", "'undefined_fn' is undefined" },
    { "{{ x + 1 }}", "{}", "'x' is undefined" },
    { "{% for i in none %}{% endfor %}", "{}", "'NoneType' object is not iterable" },
    { "{% for i in 5 %}{% endfor %}", "{}", "'int' object is not iterable" },
    { "{{ 1 / 0 }}", "{}", "division by zero" },
    { "{{ 1 // 0 }}", "{}", "integer division or modulo by zero" },
    { "{{ [1,2]|tojson }}{{ x|tojson }}", "{}", "Object of type Undefined is not JSON serializable" },
    { "{% if %}", "{}", "Expected an expression, got 'end of statement block'" },
    { "{% for %}", "{}", "Expected an expression, got 'end of statement block'" },
    { "{{ 1 + }}", "{}", "unexpected 'end of print statement'" },
    { "{% endif %}", "{}", "Encountered unknown tag 'endif'." },
    { "{{ x|nosuchfilter }}", "{}", "No filter named 'nosuchfilter'." },
    { "{{ x is nosuchtest }}", "{}", "No test named 'nosuchtest'." },
    { "{{ 'abc' }", "{}", "unexpected '}'" },
    { "{{ -1 }}|{{ - 1.5 }}|{{ -x|default(3) }}|{{ +3 }}|{{ not true }}|{{ not none }}", "{}", "'x' is undefined" },
    { "{{ 10 - 2 - 3 }}|{{ 2 * 3 + 4 }}|{{ 2 + 3 * 4 }}|{{ (2 + 3) * 4 }}|{{ 1 ~ 2 + 3 }}", "{}", "can only concatenate str (not \"int\") to str" },
    { "{{ messages[0].content }}", "{}", "'messages' is undefined" },
    { "{{ 'x'.join([1]) }}", "{}", "sequence item 0: expected str instance, int found" },
    { "{{ foo.0 }}", "{}", "'foo' is undefined" },
    { "{{ 5 > 'a' }}", "{}", "'>' not supported between instances of 'int' and 'str'" },
    { "{% set x = 5 %}{% set x.y = 1 %}", "{}", "cannot assign attribute on non-namespace object" },
    { "{{ 123|length }}", "{}", "object of type 'int' has no len()" },
    { "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", "{}", "macro 'm' takes not more than 1 argument(s)" },
    { "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}", "{}", "macro 'm' takes no keyword argument 'b'" },
    { "{{ range(100001)|length }}", "{}", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)." },
    { "{{ x.content.content }}", "{\"x\": {}}", "'dict object' has no attribute 'content'" },
    { "{{ namespace(a=1)|tojson }}", "{}", "Object of type Namespace is not JSON serializable" },
    { "{{ {'a': 1}.pop('a') }}", "{}", "access to attribute 'pop' of 'dict' object is unsafe." },
    { "{{ [3, 'a']|sort }}", "{}", "'<' not supported between instances of 'str' and 'int'" },
    { "{{ 'abc'[0:3:0] }}", "{}", "slice step cannot be zero" },
    { "{{ x[1:] }}", "{}", "'x' is undefined" },
    { "{{ 1 < none }}", "{}", "'<' not supported between instances of 'int' and 'NoneType'" },
    { "{{ x < 1 }}", "{}", "'x' is undefined" },
    { "{{ x in 'abc' }}", "{}", "'in <string>' requires string as left operand, not Undefined" },
    { "{{ 1 in 'abc' }}", "{}", "'in <string>' requires string as left operand, not int" },
    { "{{ {} + {} }}", "{}", "unsupported operand type(s) for +: 'dict' and 'dict'" },
    { "{{ range(1, 2, 0) }}", "{}", "range() arg 3 must not be zero" },
    { "{{ raise_exception('multi\nline \xc3\xa9') }}", "{}", "multi\nline \xc3\xa9" },
    { "{{ raise_exception(5) }}", "{}", "5" },
    { "{{ cycler() }}", "{}", "at least one item has to be provided" },
    { "{{ '%s %s' % ('a',) }}", "{}", "not enough arguments for format string" },
    { "{% for i in [1] %}{{ x|nope }}{% endfor %}", "{}", "No filter named 'nope'." },
    { "{% if true %}{% for i in [1] %}{{ i|nope }}{% endfor %}{% endif %}", "{}", "No filter named 'nope'." },
    { "{{ [1, 2]|map('nope')|list }}", "{}", "No filter named 'nope'." },
    { "{% do x %}", "{}", "Encountered unknown tag 'do'." },
    { "{{ {[1]: 2} }}", "{}", "unhashable type: 'list'" },
    { "{{ 1 is defined is defined }}", "{}", "You cannot chain multiple tests with is" },
    { "{{ a.b.c.d is defined }}", "{}", "'a' is undefined" },
    { "{% for x in tools %}{% endfor %}", "{\"tools\": null}", "'NoneType' object is not iterable" },
    { "{{ [1,2]|select('odd')|length }}", "{}", "object of type 'generator' has no len()" },
    { "{{ [1,2]|select('odd')|tojson }}", "{}", "Object of type generator is not JSON serializable" },
    { "{{ [1,2]|map('string')|last }}", "{}", "'generator' object is not reversible" },
    { "{{ {'a': 1}.items()|tojson }}", "{}", "Object of type dict_items is not JSON serializable" },
    { "{{ {'a': 1}|items|length }}", "{}", "object of type 'generator' has no len()" },
    { "{{ range(3)|tojson }}", "{}", "Object of type range is not JSON serializable" },
    { "{{ [1,2,3]|reverse|length }}", "{}", "object of type 'list_reverseiterator' has no len()" },
    { "{{ none|unique|list }}", "{}", "'NoneType' object is not iterable" },
};

static int render(const char *tmpl, const char *vars_json, const cdx_tmpl_opts *opts, char **out, size_t *n, cdx_err *err)
{
    cdx_tmpl *t = NULL;
    *out = NULL;
    int rc = cdx_tmpl_parse(tmpl, strlen(tmpl), &t, err);
    if (rc < 0)
        return rc;
    json_error_t je;
    json_t *v = vars_json ? json_loads(vars_json, JSON_ALLOW_NUL, &je) : NULL;
    cdx_tmpl_opts o = opts ? *opts : (cdx_tmpl_opts){0};
    if (!o.now_s)
        o.now_s = 1700000000;
    rc = cdx_tmpl_render(t, v, &o, out, n, err);
    json_decref(v);
    cdx_tmpl_free(t);
    return rc;
}

static void t_language(void)
{
    int bad = 0;
    for (size_t i = 0; i < sizeof k_render / sizeof k_render[0]; i++) {
        const tcase *c = &k_render[i];
        char *out = NULL;
        size_t n = 0;
        cdx_err err = {0};
        int rc = render(c->tmpl, c->vars, NULL, &out, &n, &err);
        bool ok = rc == 0 && n == strlen(c->want) && memcmp(out, c->want, n) == 0;
        CHECKF(ok, "%s\n    want: %s\n    got:  %s", c->tmpl, c->want, rc ? err.msg : out);
        bad += !ok;
        free(out);
    }
    CHECK(bad == 0);
}

static void t_errors(void)
{
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++) {
        const tcase *c = &k_errors[i];
        char *out = NULL;
        size_t n = 0;
        cdx_err err = {0};
        int rc = render(c->tmpl, c->vars, NULL, &out, &n, &err);
        CHECKF(rc == CDX_ETEMPLATE && strstr(err.msg, c->want), "%s: want error \"%s\", got rc %d: %s", c->tmpl,
               c->want, rc, rc ? err.msg : out);
        CHECKF(rc != 0 || out == NULL, "%s: output left behind on error", c->tmpl);
        free(out);
    }
}

static void expect_error(const char *tmpl, const cdx_tmpl_opts *opts, const char *want)
{
    char *out = NULL;
    size_t n = 0;
    cdx_err err = {0};
    int rc = render(tmpl, NULL, opts, &out, &n, &err);
    CHECKF(rc == CDX_ETEMPLATE && strstr(err.msg, want), "%s: want \"%s\", got rc %d: %s", tmpl, want, rc,
           rc ? err.msg : "(rendered)");
    free(out);
}

static void t_positions(void)
{
    expect_error("line one\n{{ 1 + }}", NULL, "template syntax error at line 2 col 8");
    expect_error("{% if x %}\n  {% for %}", NULL, "line 2 col 10");
    expect_error("ab\n\n   {{ 'x' + 1 }}", NULL, "template error at line 3 col 11");
    expect_error("{% for i in [1] %}\n{{ raise_exception('stop ' ~ i) }}{% endfor %}", NULL, "line 2 col 19: stop 1");
    expect_error("{{ 'unterminated }}", NULL, "line 1 col 4");
    expect_error("{# never closed", NULL, "missing end of comment tag");
    expect_error("{% raw %}never closed", NULL, "missing end of raw directive");
    expect_error("{% if true %}{% endfor %}", NULL, "Encountered unknown tag 'endfor'");
    expect_error("{{ (1, 2] }}", NULL, "unexpected ']', expected ')'");
    expect_error("{{ 'abc' | nosuch }}", NULL, "line 1 col 12: No filter named 'nosuch'.");
    expect_error("{{ 9223372036854775808 }}", NULL, "integer literal too large");
}

static void t_guards(void)
{
    /* endless recursion, a loop that runs too long, too much output, too much memory */
    expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, "nests deeper than");
    cdx_tmpl_opts o = { .max_steps = 200000 };
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", &o, "steps");
    cdx_tmpl_opts o2 = { .max_output_bytes = 1000 };
    expect_error("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", &o2, "the output passes 1000 bytes");
    cdx_tmpl_opts o3 = { .max_memory_bytes = 1 << 20 };
    expect_error("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 &o3, "memory");
    /* nesting in the source itself */
    char deep[4096] = "{{ ";
    for (int i = 0; i < 1000; i++)
        strcat(deep, "(");
    expect_error(deep, NULL, "nested too deeply");
    expect_error("{{ 'x' * 100000000000000000 }}", NULL, "line 1 col 8");
    expect_error("{{ [0] * 10000000000 }}", NULL, "");
}

static void t_vars(void)
{
    cdx_tmpl *t = NULL;
    cdx_err err = {0};
    REQUIRE(cdx_tmpl_parse("{{ a }}", 7, &t, &err) == 0);
    json_t *notobj = json_array();
    char *out = NULL;
    size_t n;
    CHECK(cdx_tmpl_render(t, notobj, NULL, &out, &n, &err) == CDX_EINVAL);
    CHECK(out == NULL);
    json_decref(notobj);
    /* a parsed template renders the same twice (it is not changed by rendering) */
    json_t *v = json_pack("{s:s}", "a", "x");
    for (int i = 0; i < 2; i++) {
        REQUIRE(cdx_tmpl_render(t, v, NULL, &out, &n, &err) == 0);
        CHECK(n == 1 && out[0] == 'x');
        free(out);
    }
    json_decref(v);
    cdx_tmpl_free(t);
    cdx_tmpl_free(NULL);
    /* invalid UTF-8 in the source is refused */
    CHECK(cdx_tmpl_parse("ab\xff", 3, &t, &err) == CDX_ETEMPLATE);
    CHECK(strstr(err.msg, "UTF-8") != NULL);
    /* the output may hold NUL bytes; out_len counts them */
    REQUIRE(cdx_tmpl_parse("a{{ '\\x00' }}b", 14, &t, &err) == 0);
    REQUIRE(cdx_tmpl_render(t, NULL, NULL, &out, &n, &err) == 0);
    CHECK(n == 3 && out[1] == 0 && out[2] == 'b');
    free(out);
    cdx_tmpl_free(t);
}

static char *read_text(const char *path)
{
    char *s = NULL;
    size_t n;
    cdx_err err = {0};
    return cdx_file_read_all(path, 1 << 24, &s, &n, &err) == 0 ? s : NULL;
}

static void write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

static void t_load_fixture_dir(void)
{
    /* deepseek's folder holds its tokenizer_config.json: the template and the special tokens
     * (bos/eos/pad as AddedToken objects, unk_token null: left out, as transformers does) */
    const char *dir = "../shared/fixtures/chat/deepseek-r1-distill-qwen";
    char *src = NULL;
    json_t *tok = NULL;
    cdx_err err = {0};
    REQUIRE(cdx_chat_template_load(dir, NULL, &src, &tok, &err) == 0);
    char *want = read_text("../shared/fixtures/chat/deepseek-r1-distill-qwen/template.jinja");
    REQUIRE(want != NULL);
    size_t wl = strlen(want);
    while (wl && want[wl - 1] == '\n')
        wl--;
    CHECK(strlen(src) == wl && memcmp(src, want, wl) == 0);
    CHECK(!strcmp(json_string_value(json_object_get(tok, "bos_token")), "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"));
    CHECK(!strcmp(json_string_value(json_object_get(tok, "eos_token")), "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"));
    CHECK(json_object_get(tok, "pad_token") != NULL);
    CHECK(json_object_get(tok, "unk_token") == NULL);
    free(want);
    free(src);
    json_decref(tok);
}

static void t_load_variants(void)
{
    char dir[] = "/tmp/cdx_tmpl_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char p[256], *src = NULL;
    json_t *tok = NULL;
    cdx_err err = {0};
    /* tokenizer_config.json with a list of named templates, tokens as strings and objects */
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    write_text(p, "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\", \"lstrip\": false},"
                  " \"additional_special_tokens\": [\"<a>\", {\"content\": \"<b>\"}],"
                  " \"chat_template\": [{\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"tool_use\", \"template\": \"T\"}]}");
    REQUIRE(cdx_chat_template_load(dir, NULL, &src, &tok, &err) == 0);
    CHECK(!strcmp(src, "D"));
    CHECK(!strcmp(json_string_value(json_object_get(tok, "bos_token")), "<s>"));
    CHECK(!strcmp(json_string_value(json_object_get(tok, "eos_token")), "</s>"));
    CHECK(json_array_size(json_object_get(tok, "additional_special_tokens")) == 2);
    free(src);
    json_decref(tok);
    REQUIRE(cdx_chat_template_load(dir, "tool_use", &src, &tok, &err) == 0);
    CHECK(!strcmp(src, "T"));
    free(src);
    json_decref(tok);
    CHECK(cdx_chat_template_load(dir, "nope", &src, &tok, &err) == CDX_ENOTFOUND);
    /* chat_template.json wins over tokenizer_config.json; chat_template.jinja over both */
    snprintf(p, sizeof p, "%s/chat_template.json", dir);
    write_text(p, "{\"chat_template\": \"J\"}");
    REQUIRE(cdx_chat_template_load(dir, NULL, &src, &tok, &err) == 0);
    CHECK(!strcmp(src, "J"));
    free(src);
    json_decref(tok);
    char pj[256];
    snprintf(pj, sizeof pj, "%s/chat_template.jinja", dir);
    write_text(pj, "{{ bos_token }}K");
    REQUIRE(cdx_chat_template_load(dir, NULL, &src, &tok, &err) == 0);
    CHECK(!strcmp(src, "{{ bos_token }}K"));
    /* and cdx_chat_render passes the tokens */
    cdx_tmpl *t = NULL;
    REQUIRE(cdx_tmpl_parse(src, strlen(src), &t, &err) == 0);
    char *out = NULL;
    size_t n;
    json_t *msgs = json_array();
    REQUIRE(cdx_chat_render(t, msgs, true, tok, NULL, &out, &n, &err) == 0);
    CHECK(!strcmp(out, "<s>K"));
    free(out);
    json_decref(msgs);
    cdx_tmpl_free(t);
    free(src);
    json_decref(tok);
    unlink(pj);
    unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    unlink(p);
    /* no template at all */
    CHECK(cdx_chat_template_load(dir, NULL, &src, &tok, &err) == CDX_ENOTFOUND);
    rmdir(dir);
    CHECK(cdx_chat_template_load("/nonexistent/caldrix", NULL, &src, &tok, &err) == CDX_ENOTFOUND);
}

/* llama.cpp's vocab GGUFs for phi-3 and qwen2 carry tokenizer.chat_template; the expected texts
 * are Python Jinja2's renderings (shared/tools/fixtures/chat/render.py) of those templates with
 * the tokens the GGUF names by id (phi-3: bos "<s>", eos/pad "<|endoftext|>", unk "<unk>"). */
static void t_load_gguf(void)
{
    static const struct { const char *path, *want; } k[] = {
        { "../shared/models/llamacpp-vocab/ggml-vocab-phi-3.gguf",
          "<s><|user|>\nHello!<|end|>\n<|assistant|>\nHi.<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n" },
        { "../shared/models/llamacpp-vocab/ggml-vocab-qwen2.gguf",
          "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\nHi.<|im_end|>\n"
          "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n" },
    };
    json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"Be nice.\"},{\"role\":\"user\",\"content\":\"Hello!\"},"
                              "{\"role\":\"assistant\",\"content\":\"Hi.\"},{\"role\":\"user\",\"content\":\"Bye\"}]", 0, NULL);
    REQUIRE(msgs != NULL);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char *src = NULL, *out = NULL;
        json_t *tok = NULL;
        cdx_err err = {0};
        cdx_tmpl *t = NULL;
        size_t n = 0;
        int rc = cdx_chat_template_load(k[i].path, NULL, &src, &tok, &err);
        CHECKF(rc == 0, "%s: %s", k[i].path, err.msg);
        if (rc == 0 && cdx_tmpl_parse(src, strlen(src), &t, &err) == 0 &&
            cdx_chat_render(t, msgs, true, tok, NULL, &out, &n, &err) == 0)
            CHECKF(!strcmp(out, k[i].want), "%s: got %s", k[i].path, out);
        else
            CHECKF(0, "%s: %s", k[i].path, err.msg);
        free(out);
        free(src);
        json_decref(tok);
        cdx_tmpl_free(t);
    }
    json_decref(msgs);
    /* a GGUF without a template says which key is missing */
    char *src = NULL;
    json_t *tok = NULL;
    cdx_err err = {0};
    CHECK(cdx_chat_template_load("../shared/models/llamacpp-vocab/ggml-vocab-gpt-2.gguf", NULL, &src, &tok, &err) == CDX_ENOTFOUND);
    CHECK(strstr(err.msg, "tokenizer.chat_template") != NULL);
}

/* The tokenizer folders of ../shared/fixtures/tokenizers: their tokenizer_config.json (whose
 * model_max_length no 64-bit integer holds) gives template and tokens. Expected texts: Python
 * Jinja2 (render.py) with that chat_template and the config's special tokens. */
static void t_load_tokenizer_dirs(void)
{
    static const struct { const char *dir, *want; } k[] = {
        { "../shared/fixtures/tokenizers/llama3/",
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe nice.<|eot_id|><|start_header_id|>user"
          "<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi.<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" },
        { "../shared/fixtures/tokenizers/mistral", "<s>[INST] Hello![/INST] Hi.</s>[INST] Be nice.\n\nBye[/INST]" },
        { "../shared/fixtures/tokenizers/qwen3",
          "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\nHi.<|im_end|>\n"
          "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n" },
    };
    json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"Be nice.\"},{\"role\":\"user\",\"content\":\"Hello!\"},"
                              "{\"role\":\"assistant\",\"content\":\"Hi.\"},{\"role\":\"user\",\"content\":\"Bye\"}]", 0, NULL);
    REQUIRE(msgs != NULL);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char *src = NULL, *out = NULL;
        json_t *tok = NULL;
        cdx_err err = {0};
        cdx_tmpl *t = NULL;
        size_t n = 0;
        int rc = cdx_chat_template_load(k[i].dir, NULL, &src, &tok, &err);
        CHECKF(rc == 0, "%s: %s", k[i].dir, err.msg);
        if (rc == 0 && cdx_tmpl_parse(src, strlen(src), &t, &err) == 0 &&
            cdx_chat_render(t, msgs, true, tok, NULL, &out, &n, &err) == 0)
            CHECKF(!strcmp(out, k[i].want), "%s: got %s", k[i].dir, out);
        else
            CHECKF(0, "%s: %s", k[i].dir, err.msg);
        free(out);
        free(src);
        json_decref(tok);
        cdx_tmpl_free(t);
    }
    json_decref(msgs);
}

static void t_strftime(void)
{
    char *out = NULL;
    size_t n;
    cdx_err err = {0};
    cdx_tmpl_opts o = { .now_s = 1700000000 };
    REQUIRE(render("{{ strftime_now('%Y-%m-%d %H:%M %B %d, %Y') }}", NULL, &o, &out, &n, &err) == 0);
    CHECK(!strcmp(out, "2023-11-14 22:13 November 14, 2023"));
    free(out);
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    RUN("templates render as Python Jinja2 renders them", t_language);
    RUN("templates fail where Python Jinja2 raises, with its message", t_errors);
    RUN("errors name the line and column", t_positions);
    RUN("endless loops, recursion, output and memory are bounded", t_guards);
    RUN("variables must be an object; a template renders the same twice; bad UTF-8 is refused", t_vars);
    RUN("a model folder gives its chat template and special tokens", t_load_fixture_dir);
    RUN("chat_template.jinja, chat_template.json, named templates and token objects", t_load_variants);
    RUN("a GGUF's tokenizer.chat_template renders with the tokens it names", t_load_gguf);
    RUN("tokenizer folders (huge model_max_length included) give template and tokens", t_load_tokenizer_dirs);
    RUN("strftime_now uses the render's clock", t_strftime);
    return t_done("template");
}
