-- 0011_entity_name_tokens: the words of entity names and aliases in a
-- btree, for the entity leg of memory.search.  Under forced row-level
-- security pg_trgm's <% is not leakproof, so it runs after the policy's
-- qual and the trigram index on normalized_name is never an index
-- condition: the leg computed word_similarity for every name and alias of
-- the project.  Btree equality on text and uuid is leakproof and is an
-- index condition under the policy, so the leg's candidates (the entities
-- sharing a whole word with the question) are one index range per word.
--
-- One row per entity and distinct word (split on the spaces of the
-- normalized name) of its name or any of its aliases, kept by
-- tg_entities__name_tokens and tg_entity_aliases__name_tokens
-- (functions/076_search_entities.sql) as names and aliases are inserted,
-- deleted (a wipe; a project wipe cascades through entities) or (by the
-- owner) renamed.  No foreign key: like fact_terms, the referential check
-- per row would cost the write path (assert_facts creates entities); the
-- delete triggers find a row by this key from the deleted names.  Keyed by
-- project first, so tokens never mix projects or orgs.
create table memory_internal.entity_name_tokens (
  org_id     uuid not null,
  project_id uuid not null,
  token      text not null,
  entity_id  uuid not null,
  primary key (org_id, project_id, token, entity_id)
);
comment on table memory_internal.entity_name_tokens is
  'The words of entity names and aliases: one row per entity and distinct word of its normalized name or an alias; kept by tg_entities__name_tokens and tg_entity_aliases__name_tokens. Serves the entity search leg''s candidates through btree (usable under forced RLS, unlike the trigram GIN index with <%).';

alter table memory_internal.entity_name_tokens enable row level security;
alter table memory_internal.entity_name_tokens force row level security;
create policy tenant_isolation on memory_internal.entity_name_tokens
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
revoke all on memory_internal.entity_name_tokens from public;

-- Tokens of the names and aliases stored before this table.  The owner
-- reads across orgs here only, with forced row-level security lifted
-- inside this transaction.
alter table memory.entities no force row level security;
alter table memory.entity_aliases no force row level security;
alter table memory_internal.entity_name_tokens no force row level security;

insert into memory_internal.entity_name_tokens (org_id, project_id, token, entity_id)
select m.org_id, m.project_id, u.token, m.entity_id
  from (select n.org_id, n.project_id, n.entity_id, n.normalized_name as name from memory.entities n
        union all
        select a.org_id, a.project_id, a.entity_id, a.normalized_alias from memory.entity_aliases a) m
 cross join lateral unnest(string_to_array(m.name, ' ')) u(token)
 group by 1, 2, 3, 4
 order by 1, 2, 3, 4;

alter table memory.entities force row level security;
alter table memory.entity_aliases force row level security;
alter table memory_internal.entity_name_tokens force row level security;
