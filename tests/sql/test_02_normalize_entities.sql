-- 02 normalization and entity resolution: one Unicode-aware normalize_text;
-- entities resolve exactly (name or alias), per project, never fuzzily.
-- Runs as chronomem_app, as the API does.  Fixture ids live in a temp table
-- (this file is sent as one query string: no psql variables).
BEGIN;
select plan(41);


set local role chronomem_app;
do $$
declare o uuid := memory.create_org('normalize org');
begin
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o),
    ('p1', memory.create_project(o, 'p1')), ('p2', memory.create_project(o, 'p2'));
end $$;

-- normalize_text ---------------------------------------------------------
select is(memory.normalize_text('Zürich'), 'zürich', 'letters with diacritics are kept (Zürich)');
select is(memory.normalize_text('ZÜRICH!'), 'zürich', 'upper case folds, punctuation goes (ZÜRICH!)');
select is(memory.normalize_text('東京'), '東京', 'CJK text is kept (東京)');
select is(memory.normalize_text('東京、日本。'), '東京 日本', 'CJK punctuation is punctuation');
-- casefold() (PostgreSQL 18) maps ß to ss; older servers lower-case only.
select is(memory.normalize_text('Straße'),
          case when exists (select from pg_proc where proname = 'casefold') then 'strasse' else 'straße' end,
          'Straße folds as the server''s Unicode case folding says');
select is(memory.normalize_text('STRASSE') = memory.normalize_text('Straße'),
          exists (select from pg_proc where proname = 'casefold'),
          'Straße and STRASSE are one name where full case folding exists');
select is(memory.normalize_text(E'  Hello,\t  World!! \n'), 'hello world', 'punctuation and whitespace collapse to one space, trimmed');
select is(memory.normalize_text('O''Brien — Jr.'), 'o brien jr', 'apostrophe, em dash and dot are separators');
select is(memory.normalize_text('ﬁle ＡＢＣ'), 'file abc', 'NFKC: ligature and full-width letters');
select is(memory.normalize_text('!!! ...'), '', 'punctuation only normalizes to empty');
select is(memory.normalize_text(null), null, 'NULL stays NULL');
-- Text that is already lowercase ASCII words with single spaces is its own
-- result (the fast path); everything else goes through the replacement.
-- t || '!' never takes the fast path and normalizes as t does (the '!'
-- ends as a trailing space, trimmed), so it is the replacement alone: the
-- two agree on every one- and two-character ASCII string, spaced pairs,
-- the first code points and some Unicode.
select is((with s(t) as (
             select chr(a) || chr(b) from generate_series(1, 127) a, generate_series(1, 127) b
             union all
             select chr(a) || ' ' || chr(b) || 'x  y ' from generate_series(1, 127) a, generate_series(1, 127) b
             union all
             select chr(a) from generate_series(1, 1000) a
             union all
             select x from unnest(array['', ' ', 'a  b', ' a', 'a ', 'Zürich', '東京 tower', 'ﬁne', 'İstanbul', 'ß',
                                        'a' || chr(160) || 'b', 'w0s12 is on the pro plan']) x)
           select count(*) filter (where memory.normalize_text(t) is distinct from
                                         memory.normalize_text(t || '!'))
             from s),
          0::bigint, 'the fast path gives what the replacement gives');
select ok(memory.normalize_text('w0s12 is on the pro plan') = 'w0s12 is on the pro plan'
          and memory.normalize_text('W0s12  is on the PRO plan.') = 'w0s12 is on the pro plan',
          'positive control: normalized text is unchanged, the same words otherwise spelt normalize to it');

-- entities resolve per project -------------------------------------------
insert into ids values ('zurich', memory.upsert_entity(pg_temp.id('p1'), 'Zürich'));
select is(memory.upsert_entity(pg_temp.id('p1'), 'ZÜRICH!'), pg_temp.id('zurich'),
          '''ZÜRICH!'' resolves to the Zürich entity');
select is(memory.upsert_entity(pg_temp.id('p1'), '  zürich  '), pg_temp.id('zurich'),
          '''  zürich  '' resolves to the Zürich entity');
select is((select count(*)::int from memory.entities where project_id = pg_temp.id('p1')), 1,
          'one entity after three spellings');
select is((select name from memory.entities where entity_id = pg_temp.id('zurich')), 'Zürich',
          'the entity keeps the first spelling as its name');
select isnt(memory.upsert_entity(pg_temp.id('p1'), 'Zurich'), pg_temp.id('zurich'),
            'Zurich without the umlaut is another entity (exact, never fuzzy)');

insert into ids values ('tokyo', memory.upsert_entity(pg_temp.id('p1'), '東京'));
select is(memory.upsert_entity(pg_temp.id('p1'), '東京'), pg_temp.id('tokyo'), '東京 matches 東京');
select isnt(pg_temp.id('tokyo'), pg_temp.id('zurich'), '東京 is not Zürich');
select is((select normalized_name from memory.entities where entity_id = pg_temp.id('tokyo')), '東京',
          'a CJK name is stored normalized, not emptied');

select is(memory.upsert_entity(pg_temp.id('p1'), 'Zürich', 'city', 'Largest Swiss city'), pg_temp.id('zurich'),
          'upsert with type and summary keeps the entity');
select is((select entity_type || ': ' || summary from memory.entities where entity_id = pg_temp.id('zurich')),
          'city: Largest Swiss city', 'type and summary are set');

select throws_ok($$ select memory.upsert_entity(pg_temp.id('p1'), '?!') $$, '22023', null,
                 'a name with no letters or digits is refused');

-- aliases ------------------------------------------------------------------
select throws_ok($$ select memory.add_alias(pg_temp.id('p1'), 'Genève', 'Genf') $$, 'P0002', null,
                 'alias for an entity that does not exist: not found');
select is(memory.add_alias(pg_temp.id('p1'), 'ZÜRICH', 'Züri'), pg_temp.id('zurich'),
          'add_alias returns the entity it names');
select is(memory.upsert_entity(pg_temp.id('p1'), 'züri.'), pg_temp.id('zurich'),
          'a name matching the alias resolves to the entity');
select is(memory.add_alias(pg_temp.id('p1'), 'Zürich', 'ZÜRI'), pg_temp.id('zurich'),
          're-adding the same alias is a no-op');
select throws_ok($$ select memory.add_alias(pg_temp.id('p1'), 'Zürich', '東京') $$, '23505', null,
                 'an alias that already names another entity is refused');

-- Facts written with plain strings share the entity's identity.
select is((memory.assert_facts(pg_temp.id('p1'),
            '[{"subject": "Züri", "predicate": "located in", "object": "Switzerland",
               "valid_from": "2020-01-01T00:00:00Z"}]')->>'inserted')::int, 1,
          'a fact about the alias is inserted');
select is((select subject_id from memory_internal.fact_versions(pg_temp.id('p1')) where predicate = 'located in'),
          pg_temp.id('zurich'), 'its subject is the aliased entity');
select is((memory.assert_facts(pg_temp.id('p1'),
            '[{"subject": "Alice", "predicate": "visited", "object": "Züri", "content": "Alice visited Zurich"},
              {"subject": "Alice", "predicate": "visited", "object": "ZÜRICH", "content": "Alice visited Zurich"}]')->>'inserted')::int, 1,
          'an alias and the canonical name as object are one identity (second is skipped)');
select is((select object_entity_id::text || ' ' || object_key
             from memory_internal.fact_versions(pg_temp.id('p1')) where predicate = 'visited'),
          pg_temp.id('zurich')::text || ' zürich', 'the object is the entity, keyed by its canonical name');

-- Same name in another project: another entity; aliases do not cross.
select isnt(memory.upsert_entity(pg_temp.id('p2'), 'Zürich'), pg_temp.id('zurich'),
            'Zürich in project p2 is another entity');
select isnt(memory.upsert_entity(pg_temp.id('p2'), 'Züri'), memory.upsert_entity(pg_temp.id('p2'), 'Zürich'),
            'p1''s alias does not resolve in p2');
select is((select count(distinct project_id)::int from memory.entities where normalized_name = 'zürich'), 2,
          'one Zürich per project');

-- Default-ignorable code points (zero-width characters, direction marks,
-- BOM, soft hyphen, word joiner, variation selectors) are dropped: 18
-- spellings of José Alvarez that look identical are one entity.  A Cyrillic
-- о (U+043E) is another letter, not an invisible one: that spelling stays
-- a separate entity (a wrong merge is worse than a missed one).
create temp table spellings (n integer, name text) on commit drop;
insert into spellings values
  (1, 'José Alvarez'), (2, U&'Jos\00E9\200D Alvarez'), (3, U&'Jos\00E9 \200CAlvarez'),
  (4, U&'\200BJos\00E9 Alvarez'), (5, U&'Jos\00E9 Alvarez\200E'), (6, U&'\200FJos\00E9 Alvarez'),
  (7, U&'\FEFFJos\00E9 Alvarez'), (8, U&'Jos\00E9 Al\00ADva\00ADrez'), (9, U&'Jos\2060\00E9 Alvarez'),
  (10, U&'Jos\00E9\FE0F Alvarez'), (11, U&'J\200Bo\200Bs\00E9 Alvarez'), (12, U&'Jose\0301 Al\200Dvarez'),
  (13, U&'Jos\00E9 Alva\200Crez'), (14, U&'JOS\00C9 ALVAREZ\FEFF'), (15, U&'Jos\00E9\00A0Alvarez\200F'),
  (16, U&'Jos\00E9 \2060Alvarez\2060'), (17, U&'\200E\200FJos\00E9 Alvarez'), (18, U&'Jos\00E9 A\FE00lvarez');
select is((select count(distinct memory.normalize_text(name))::int from spellings), 1,
          'the 18 spellings of José Alvarez normalize to one key');
select is((select memory.normalize_text(name) from spellings where n = 8), 'josé alvarez',
          'a soft hyphen inside a word is dropped, not a separator');
select is((select count(distinct memory.upsert_entity(pg_temp.id('p2'), name))::int from spellings), 1,
          'the 18 spellings resolve to one entity');
select isnt(memory.upsert_entity(pg_temp.id('p2'), U&'Jos\00E9 Alvar\043Ez'),
            memory.upsert_entity(pg_temp.id('p2'), 'José Alvarez'),
            'a Cyrillic о spelling stays a separate entity (confusables are not merged)');
select is(memory.normalize_text(U&'caf\00E9\200B'), memory.normalize_text('café'),
          'a zero-width space at the end of non-ASCII text goes too');

select * from finish();
ROLLBACK;
