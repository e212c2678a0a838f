/**
 * The typed client for Chronomem's HTTP API, over fetch: the methods of the Python
 * client (clients/python/chronomem_client/client.py), in camelCase, awaited.
 *
 *     const memory = new Client("http://127.0.0.1:8765", token);
 *     await memory.declarePredicate(project, "plan", "one");
 *     await memory.assertFacts(project, [
 *       { subject: "user 42", predicate: "plan", object: "pro", valid_from: "2024-01-01" },
 *     ]);
 *     (await memory.listFacts(project, { asOf: "2024-02-01" })).facts;
 *
 * Every request and answer is typed from src/schema.ts, which openapi-typescript
 * generates from the server's OpenAPI document (`npm run generate`): a route or a
 * field the document does not have fails the type check. An error answer throws a
 * `ChronomemError` with its status, stable code, message and field. Instants may be
 * `Date`s or ISO 8601 strings (zone-less = UTC).
 */

import type { components, paths } from "./schema.js";

export type { components, operations, paths } from "./schema.js";

/** The API's request and response models, by name (e.g. `Schemas["FactPage"]`). */
export type Schemas = components["schemas"];
/** A UUID (a project, fact, key or webhook endpoint). */
export type Id = string;
/** An instant: a `Date`, or ISO 8601 text (zone-less = UTC). */
export type When = Date | string;
/** A message to ingest; `occurred_at` may be a `Date` too. */
export type MessageIn = Omit<Schemas["MessageIn"], "occurred_at"> & {
  occurred_at?: When | null;
};
export type FactIn = Schemas["FactIn"];
export type Permission = Schemas["ApiKeyCreate"]["permissions"][number];
export type Cardinality = Schemas["PredicateDeclare"]["cardinality"];
export type Standing = Schemas["FactReview"]["standing"];
export type Resolution = Schemas["ConflictResolve"]["resolution"];
/** Which conflicts `listConflicts` answers. */
export type ConflictStatusFilter = Schemas["ConflictSummary"]["status"] | "all";
export type SearchLeg = NonNullable<Schemas["SearchRequest"]["legs"]>[number];
export type WebhookEventType = NonNullable<Schemas["WebhookCreate"]["event_types"]>[number];

/** An error answer: `{"error": {"code", "message", "field"}}`. */
export class ChronomemError extends Error {
  override readonly name = "ChronomemError";

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field: string | null,
  ) {
    super(message);
  }

  override toString(): string {
    const where = this.field ? ` (field ${this.field})` : "";
    return `${this.name}: ${this.status} ${this.code}: ${this.message}${where}`;
  }

  /** The error an answer that is not ok carries (a body that is not the API's error
   * shape becomes `http_error` with the start of the body as message). */
  static async of(response: Response): Promise<ChronomemError> {
    const text = await response.text();
    try {
      const { error } = JSON.parse(text) as Partial<Schemas["ErrorResponse"]>;
      if (typeof error?.code === "string" && typeof error.message === "string") {
        return new ChronomemError(response.status, error.code, error.message, error.field ?? null);
      }
    } catch {
      // Not JSON: reported as http_error below.
    }
    return new ChronomemError(response.status, "http_error", text.slice(0, 200), null);
  }
}

export interface ClientOptions {
  /** Milliseconds a request may take (aborted through an AbortSignal); null: no limit.
   * Default 30 000, as the Python client's 30 s. A timeout rejects with the
   * `TimeoutError` fetch gives, not a ChronomemError. */
  timeoutMs?: number | null;
  /** The fetch to use (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

type Method = "get" | "put" | "post" | "patch" | "delete";
type Operation = { parameters: unknown; responses: unknown };
/** The methods the OpenAPI document defines for a path. */
type MethodOf<P extends keyof paths> = {
  [M in Method]: paths[P][M] extends Operation ? M : never;
}[Method];
type PathOf<O> = O extends { parameters: { path?: infer X } } ? NonNullable<X> : never;
type QueryOf<O> = O extends { parameters: { query?: infer X } } ? NonNullable<X> : never;
type HeaderOf<O> = O extends { parameters: { header?: infer X } } ? NonNullable<X> : never;
type BodyOf<O> = O extends { requestBody?: { content: { "application/json": infer B } } }
  ? B
  : never;
/** The JSON of an operation's success answer (200, or 201 for a creation). */
type AnswerOf<O> = O extends { responses: { 200: { content: { "application/json": infer A } } } }
  ? A
  : O extends { responses: { 201: { content: { "application/json": infer A } } } }
    ? A
    : never;
/** What a request carries, each part typed by the operation; `path` is required exactly
 * when the path has parameters. */
type RequestOf<O> = ([PathOf<O>] extends [never] ? { path?: undefined } : { path: PathOf<O> }) & {
  query?: QueryOf<O>;
  header?: HeaderOf<O>;
  body?: BodyOf<O>;
};

function instant(value: When | undefined): string | undefined {
  return value instanceof Date ? value.toISOString() : value;
}

/** A client for one server and one API key; it holds no connection of its own (fetch
 * pools them). */
export class Client {
  readonly baseUrl: string;
  readonly #token: string | undefined;
  readonly #timeoutMs: number | null;
  readonly #fetch: typeof globalThis.fetch;

  constructor(baseUrl: string, token?: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#token = token;
    this.#timeoutMs = options.timeoutMs === undefined ? 30_000 : options.timeoutMs;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** The calling key's org. */
  getOrg(): Promise<Schemas["Org"]> {
    return this.#call("get", "/v1/org", {});
  }

  /** The org's projects the key may see (all with project:manage, else its own). */
  listProjects(): Promise<Schemas["ProjectList"]> {
    return this.#call("get", "/v1/projects", {});
  }

  createProject(name: string): Promise<Schemas["Project"]> {
    return this.#call("post", "/v1/projects", { body: { name } });
  }

  getProject(project: Id): Promise<Schemas["Project"]> {
    return this.#call("get", "/v1/projects/{project_id}", { path: { project_id: project } });
  }

  deleteProject(project: Id): Promise<Schemas["ProjectDeleted"]> {
    return this.#call("delete", "/v1/projects/{project_id}", { path: { project_id: project } });
  }

  /** A new key of the project; its token is in this answer only. */
  createApiKey(
    project: Id,
    name: string,
    permissions: readonly Permission[],
  ): Promise<Schemas["ApiKeyCreated"]> {
    return this.#call("post", "/v1/projects/{project_id}/api-keys", {
      path: { project_id: project },
      body: { name, permissions: [...permissions] },
    });
  }

  listApiKeys(project: Id): Promise<Schemas["ApiKeyList"]> {
    return this.#call("get", "/v1/projects/{project_id}/api-keys", {
      path: { project_id: project },
    });
  }

  revokeApiKey(project: Id, key: Id): Promise<Schemas["ApiKeyRevoked"]> {
    return this.#call("delete", "/v1/projects/{project_id}/api-keys/{key_id}", {
      path: { project_id: project, key_id: key },
    });
  }

  /** Append messages to a session as episodes; extraction and embeddings follow. With
   * an idempotency key, a retry with the same body gets the first answer back. */
  ingest(
    project: Id,
    session: string,
    messages: readonly MessageIn[],
    options: {
      idempotencyKey?: string;
      sessionMetadata?: Schemas["IngestRequest"]["session_metadata"];
    } = {},
  ): Promise<Schemas["IngestResult"]> {
    return this.#call("post", "/v1/projects/{project_id}/memory", {
      path: { project_id: project },
      header: options.idempotencyKey ? { "Idempotency-Key": options.idempotencyKey } : {},
      body: {
        session,
        messages: messages.map((m) => ({ ...m, occurred_at: instant(m.occurred_at ?? undefined) })),
        session_metadata: options.sessionMetadata,
      },
    });
  }

  /** Wipe the project's memory, or one session's, or one subject's. */
  wipe(
    project: Id,
    options: { session?: string; subject?: string } = {},
  ): Promise<Schemas["WipeResult"]> {
    return this.#call("delete", "/v1/projects/{project_id}/memory", {
      path: { project_id: project },
      query: { session: options.session, subject: options.subject },
    });
  }

  /** Keep the project's episodes `seconds` after they are stored (null: for ever). */
  setRetention(project: Id, seconds: number | null): Promise<Schemas["Retention"]> {
    return this.#call("put", "/v1/projects/{project_id}/retention", {
      path: { project_id: project },
      body: { retention_seconds: seconds },
    });
  }

  /** Everything the project holds about one subject (by name or alias): its entity,
   * every version of its facts with their events, the messages that are their sources
   * or name it, its edges and notes. For a data-subject access request. */
  exportSubject(project: Id, subject: string): Promise<Schemas["SubjectExport"]> {
    return this.#call("get", "/v1/projects/{project_id}/subject-export", {
      path: { project_id: project },
      query: { subject },
    });
  }

  backlog(project: Id): Promise<Schemas["Backlog"]> {
    return this.#call("get", "/v1/projects/{project_id}/backlog", {
      path: { project_id: project },
    });
  }

  sessions(
    project: Id,
    options: { cursor?: string; limit?: number } = {},
  ): Promise<Schemas["SessionPage"]> {
    return this.#call("get", "/v1/projects/{project_id}/sessions", {
      path: { project_id: project },
      query: { cursor: options.cursor, limit: options.limit },
    });
  }

  /** A session's messages in order; pass next_cursor as `after` for the next page. */
  sessionMessages(
    project: Id,
    session: string,
    options: { after?: number; limit?: number } = {},
  ): Promise<Schemas["MessagePage"]> {
    return this.#call("get", "/v1/projects/{project_id}/sessions/{session}/messages", {
      path: { project_id: project, session },
      query: { after: options.after, limit: options.limit },
    });
  }

  /** Assert a batch: each fact is inserted, skipped, refused (a retracted claim) or
   * invalid (with its field), as its outcome in the answer says. */
  assertFacts(
    project: Id,
    facts: readonly FactIn[],
    options: { overrideTombstones?: boolean } = {},
  ): Promise<Schemas["AssertResult"]> {
    return this.#call("post", "/v1/projects/{project_id}/facts", {
      path: { project_id: project },
      body: { facts: [...facts], override_tombstones: options.overrideTombstones ?? false },
    });
  }

  /** The facts that hold at `asOf` as the store believed at `knownAt` (both default now). */
  listFacts(
    project: Id,
    options: {
      asOf?: When;
      knownAt?: When;
      subject?: string;
      predicate?: string;
      cursor?: Id;
      limit?: number;
    } = {},
  ): Promise<Schemas["FactPage"]> {
    return this.#call("get", "/v1/projects/{project_id}/facts", {
      path: { project_id: project },
      query: {
        as_of: instant(options.asOf),
        known_at: instant(options.knownAt),
        subject: options.subject,
        predicate: options.predicate,
        cursor: options.cursor,
        limit: options.limit,
      },
    });
  }

  /** The claim never held: it is tombstoned, and what it had closed gets its window back. */
  retractFact(project: Id, fact: Id, reason?: string): Promise<Schemas["RetractResult"]> {
    return this.#call("post", "/v1/projects/{project_id}/facts/{fact_id}/retract", {
      path: { project_id: project, fact_id: fact },
      body: { reason },
    });
  }

  /** Every event of every version of the fact's identity, oldest first. */
  factHistory(project: Id, fact: Id): Promise<Schemas["FactHistory"]> {
    return this.#call("get", "/v1/projects/{project_id}/facts/{fact_id}/history", {
      path: { project_id: project, fact_id: fact },
    });
  }

  changes(
    project: Id,
    options: { since?: When; until?: When; cursor?: string; limit?: number } = {},
  ): Promise<Schemas["FactChanges"]> {
    return this.#call("get", "/v1/projects/{project_id}/changes", {
      path: { project_id: project },
      query: {
        since: instant(options.since),
        until: instant(options.until),
        cursor: options.cursor,
        limit: options.limit,
      },
    });
  }

  /** Every version of the subject's facts (of one predicate), with its events. */
  timeline(project: Id, subject: string, predicate?: string): Promise<Schemas["Timeline"]> {
    return this.#call("get", "/v1/projects/{project_id}/timeline", {
      path: { project_id: project },
      query: { subject, predicate },
    });
  }

  /** `one`: a new object supersedes the old one; `many`: objects stand side by side;
   * `unknown` removes the declaration (two objects at once then open a conflict). */
  declarePredicate(
    project: Id,
    predicate: string,
    cardinality: Cardinality,
  ): Promise<Schemas["Predicate"]> {
    return this.#call("put", "/v1/projects/{project_id}/predicates/{predicate}", {
      path: { project_id: project, predicate },
      body: { cardinality },
    });
  }

  listPredicates(project: Id): Promise<Schemas["PredicateList"]> {
    return this.#call("get", "/v1/projects/{project_id}/predicates", {
      path: { project_id: project },
    });
  }

  /** What the memory holds that disagrees: conflicts (`status` open, the default,
   * resolved or all), newest first; pass next_before and next_before_id as `before`
   * and `beforeId` for the next page. */
  listConflicts(
    project: Id,
    options: {
      status?: ConflictStatusFilter;
      predicate?: string;
      limit?: number;
      before?: When;
      beforeId?: Id;
    } = {},
  ): Promise<Schemas["ConflictList"]> {
    return this.#call("get", "/v1/projects/{project_id}/conflicts", {
      path: { project_id: project },
      query: {
        status: options.status,
        predicate: options.predicate,
        limit: options.limit,
        before: instant(options.before),
        before_id: options.beforeId,
      },
    });
  }

  getConflict(project: Id, conflict: Id): Promise<Schemas["Conflict"]> {
    return this.#call("get", "/v1/projects/{project_id}/conflicts/{conflict_id}", {
      path: { project_id: project, conflict_id: conflict },
    });
  }

  /** keep_both, supersede (`member` wins from `at`) or retract (`member` never held);
   * needs memory:review. */
  resolveConflict(
    project: Id,
    conflict: Id,
    resolution: Resolution,
    options: { member?: Id; at?: When; reason?: string } = {},
  ): Promise<Schemas["ConflictResolved"]> {
    return this.#call("post", "/v1/projects/{project_id}/conflicts/{conflict_id}/resolve", {
      path: { project_id: project, conflict_id: conflict },
      body: {
        resolution,
        member_id: options.member,
        at: instant(options.at),
        reason: options.reason,
      },
    });
  }

  /** Set a fact's standing: confirmed, unreviewed or rejected (which retracts it);
   * needs memory:review. */
  reviewFact(
    project: Id,
    fact: Id,
    standing: Standing,
    reason?: string,
  ): Promise<Schemas["FactReviewed"]> {
    return this.#call("post", "/v1/projects/{project_id}/facts/{fact_id}/review", {
      path: { project_id: project, fact_id: fact },
      body: { standing, reason },
    });
  }

  /** Per predicate, the cardinality its facts and past resolutions suggest. */
  suggestCardinality(project: Id): Promise<Schemas["CardinalitySuggestionList"]> {
    return this.#call("get", "/v1/projects/{project_id}/cardinality/suggestions", {
      path: { project_id: project },
    });
  }

  conflictPolicy(project: Id): Promise<Schemas["ConflictPolicy"]> {
    return this.#call("get", "/v1/projects/{project_id}/conflict-policy", {
      path: { project_id: project },
    });
  }

  /** Change the conflict policy; undefined keeps a value. */
  setConflictPolicy(
    project: Id,
    options: {
      contradictions?: Schemas["ConflictPolicy"]["contradictions"];
      protectConfirmed?: boolean;
      learnCardinality?: boolean;
      learnThreshold?: number;
      learnMinEvidence?: number;
    } = {},
  ): Promise<Schemas["ConflictPolicy"]> {
    return this.#call("put", "/v1/projects/{project_id}/conflict-policy", {
      path: { project_id: project },
      body: {
        contradictions: options.contradictions,
        protect_confirmed: options.protectConfirmed,
        learn_cardinality: options.learnCardinality,
        learn_threshold: options.learnThreshold,
        learn_min_evidence: options.learnMinEvidence,
      },
    });
  }

  /** Every change of a predicate's cardinality (declared, learned, undone), newest
   * first. */
  predicateChanges(
    project: Id,
    options: { limit?: number } = {},
  ): Promise<Schemas["PredicateChangeList"]> {
    return this.#call("get", "/v1/projects/{project_id}/cardinality/changes", {
      path: { project_id: project },
      query: { limit: options.limit },
    });
  }

  undoPredicateChange(project: Id, change: number): Promise<Schemas["PredicateChangeUndone"]> {
    return this.#call("post", "/v1/projects/{project_id}/cardinality/changes/{change_id}/undo", {
      path: { project_id: project, change_id: change },
    });
  }

  /** Mask, hash, drop or refuse what a detector finds (email, phone, card, iban, ip,
   * ssn, or custom:<name> with a POSIX `pattern`) in the project's later writes. */
  setRedactionRule(
    project: Id,
    detector: string,
    action: Schemas["RedactionRuleSet"]["action"],
    pattern: string | null = null,
  ): Promise<Schemas["RedactionRule"]> {
    return this.#call("put", "/v1/projects/{project_id}/redaction-rules/{detector}", {
      path: { project_id: project, detector },
      body: { action, pattern },
    });
  }

  listRedactionRules(project: Id): Promise<Schemas["RedactionRuleList"]> {
    return this.#call("get", "/v1/projects/{project_id}/redaction-rules", {
      path: { project_id: project },
    });
  }

  deleteRedactionRule(project: Id, detector: string): Promise<Schemas["RedactionRuleDeleted"]> {
    return this.#call("delete", "/v1/projects/{project_id}/redaction-rules/{detector}", {
      path: { project_id: project, detector },
    });
  }

  search(
    project: Id,
    query: string,
    options: {
      queryEmbedding?: readonly number[];
      asOf?: When;
      knownAt?: When;
      k?: number;
      legs?: readonly SearchLeg[];
      fusion?: Schemas["SearchRequest"]["fusion"];
      labels?: readonly string[];
      fields?: Record<string, unknown>;
    } = {},
  ): Promise<Schemas["SearchResult"]> {
    return this.#call("post", "/v1/projects/{project_id}/search", {
      path: { project_id: project },
      body: {
        query,
        query_embedding: options.queryEmbedding && [...options.queryEmbedding],
        as_of: instant(options.asOf),
        known_at: instant(options.knownAt),
        k: options.k,
        legs: options.legs && [...options.legs],
        fusion: options.fusion,
        labels: options.labels && [...options.labels],
        fields: options.fields,
      },
    });
  }

  /** A compact context text for a prompt, within `maxTokens`. */
  context(
    project: Id,
    query: string,
    options: {
      queryEmbedding?: readonly number[];
      asOf?: When;
      knownAt?: When;
      maxTokens?: number;
      k?: number;
      labels?: readonly string[];
      fields?: Record<string, unknown>;
    } = {},
  ): Promise<Schemas["ContextResult"]> {
    return this.#call("post", "/v1/projects/{project_id}/context", {
      path: { project_id: project },
      body: {
        query,
        query_embedding: options.queryEmbedding && [...options.queryEmbedding],
        as_of: instant(options.asOf),
        known_at: instant(options.knownAt),
        max_tokens: options.maxTokens,
        k: options.k,
        labels: options.labels && [...options.labels],
        fields: options.fields,
      },
    });
  }

  neighbors(
    project: Id,
    entity: string,
    options: { depth?: number; asOf?: When; knownAt?: When; limit?: number } = {},
  ): Promise<Schemas["Neighbors"]> {
    return this.#call("get", "/v1/projects/{project_id}/graph/neighbors", {
      path: { project_id: project },
      query: {
        entity,
        depth: options.depth,
        as_of: instant(options.asOf),
        known_at: instant(options.knownAt),
        limit: options.limit,
      },
    });
  }

  entities(
    project: Id,
    options: { cursor?: string; limit?: number } = {},
  ): Promise<Schemas["EntityPage"]> {
    return this.#call("get", "/v1/projects/{project_id}/entities", {
      path: { project_id: project },
      query: { cursor: options.cursor, limit: options.limit },
    });
  }

  upsertEntity(
    project: Id,
    name: string,
    options: { entityType?: string; summary?: string; aliases?: readonly string[] } = {},
  ): Promise<Schemas["Entity"]> {
    return this.#call("post", "/v1/projects/{project_id}/entities", {
      path: { project_id: project },
      body: {
        name,
        entity_type: options.entityType,
        summary: options.summary,
        aliases: [...(options.aliases ?? [])],
      },
    });
  }

  /** Merge the entity `absorb` names into the one `keep` names (dryRun: only say what
   * that would do). */
  mergeEntities(
    project: Id,
    keep: string,
    absorb: string,
    options: { dryRun?: boolean } = {},
  ): Promise<Schemas["EntityMerged"]> {
    return this.#call("post", "/v1/projects/{project_id}/entities/merge", {
      path: { project_id: project },
      body: { keep, absorb, dry_run: options.dryRun ?? false },
    });
  }

  /** The alias `name` becomes an entity of its own, with the facts written with it. */
  splitEntity(
    project: Id,
    name: string,
    options: { dryRun?: boolean } = {},
  ): Promise<Schemas["EntitySplitOff"]> {
    return this.#call("post", "/v1/projects/{project_id}/entities/split", {
      path: { project_id: project },
      body: { name, dry_run: options.dryRun ?? false },
    });
  }

  communities(
    project: Id,
    options: { cursor?: string; limit?: number; members?: number } = {},
  ): Promise<Schemas["CommunityList"]> {
    return this.#call("get", "/v1/projects/{project_id}/communities", {
      path: { project_id: project },
      query: { cursor: options.cursor, limit: options.limit, members: options.members },
    });
  }

  refreshCommunities(project: Id): Promise<Schemas["CommunityRefresh"]> {
    return this.#call("post", "/v1/projects/{project_id}/communities/refresh", {
      path: { project_id: project },
    });
  }

  /** Add a webhook endpoint; its signing secret is in this answer only. */
  createWebhook(
    project: Id,
    url: string,
    eventTypes?: readonly WebhookEventType[],
  ): Promise<Schemas["WebhookCreated"]> {
    return this.#call("post", "/v1/projects/{project_id}/webhooks", {
      path: { project_id: project },
      body: { url, event_types: eventTypes && [...eventTypes] },
    });
  }

  listWebhooks(project: Id): Promise<Schemas["WebhookList"]> {
    return this.#call("get", "/v1/projects/{project_id}/webhooks", {
      path: { project_id: project },
    });
  }

  /** Change the URL, the event types or the enabled flag; undefined keeps a value. */
  updateWebhook(
    project: Id,
    endpoint: Id,
    options: { url?: string; eventTypes?: readonly WebhookEventType[]; enabled?: boolean } = {},
  ): Promise<Schemas["WebhookEndpoint"]> {
    return this.#call("patch", "/v1/projects/{project_id}/webhooks/{endpoint_id}", {
      path: { project_id: project, endpoint_id: endpoint },
      body: {
        url: options.url,
        event_types: options.eventTypes && [...options.eventTypes],
        enabled: options.enabled,
      },
    });
  }

  deleteWebhook(project: Id, endpoint: Id): Promise<Schemas["WebhookDeleted"]> {
    return this.#call("delete", "/v1/projects/{project_id}/webhooks/{endpoint_id}", {
      path: { project_id: project, endpoint_id: endpoint },
    });
  }

  /** A new signing secret; it is in this answer only. */
  rotateWebhookSecret(project: Id, endpoint: Id): Promise<Schemas["WebhookCreated"]> {
    return this.#call("post", "/v1/projects/{project_id}/webhooks/{endpoint_id}/rotate", {
      path: { project_id: project, endpoint_id: endpoint },
    });
  }

  /** The endpoint's delivery log, newest first; pass next_cursor as `before`. */
  webhookDeliveries(
    project: Id,
    endpoint: Id,
    options: { limit?: number; before?: number } = {},
  ): Promise<Schemas["WebhookDeliveryPage"]> {
    return this.#call("get", "/v1/projects/{project_id}/webhooks/{endpoint_id}/deliveries", {
      path: { project_id: project, endpoint_id: endpoint },
      query: { limit: options.limit, before: options.before },
    });
  }

  webhookEventTypes(): Promise<Schemas["WebhookEventTypeList"]> {
    return this.#call("get", "/v1/webhook-event-types", {});
  }

  /** Readiness; a server that is not ready answers 503, thrown as a ChronomemError. */
  ready(): Promise<Schemas["Readiness"]> {
    return this.#call("get", "/readyz", {});
  }

  /** /metrics, Prometheus text. */
  /** Store a message with files (text, Markdown, HTML or PDF) of a session: each file is
   * kept and its text chunked into episodes that point back to it (multipart). */
  async ingestFiles(
    project: Id,
    session: string,
    files: readonly { name: string; data: Uint8Array | Blob; type?: string }[],
    options: {
      content: string;
      role?: string;
      occurredAt?: When;
      metadata?: Record<string, unknown>;
      idempotencyKey?: string;
      sessionMetadata?: Record<string, unknown>;
    },
  ): Promise<Schemas["AttachmentIngestResult"]> {
    const message = {
      session,
      messages: [
        {
          role: options.role ?? "user",
          content: options.content,
          occurred_at: instant(options.occurredAt),
          metadata: options.metadata,
        },
      ],
      session_metadata: options.sessionMetadata,
    };
    const form = new FormData();
    form.append("message", JSON.stringify(message));
    for (const file of files) {
      const blob =
        file.data instanceof Blob ? file.data : new Blob([file.data], { type: file.type ?? "" });
      form.append("file", blob, file.name);
    }
    const header: Record<string, string> = {};
    if (options.idempotencyKey) header["Idempotency-Key"] = options.idempotencyKey;
    const target = `/v1/projects/${encodeURIComponent(String(project))}/memory/attachments`;
    return (await (await this.#send("POST", target, header, form)).json()) as Schemas["AttachmentIngestResult"];
  }

  getAttachment(project: Id, attachment: Id): Promise<Schemas["Attachment"]> {
    return this.#call("get", "/v1/projects/{project_id}/attachments/{attachment_id}", {
      path: { project_id: project, attachment_id: attachment },
    });
  }

  /** An attachment's bytes, as stored. */
  async attachmentContent(project: Id, attachment: Id): Promise<Uint8Array> {
    const target =
      `/v1/projects/${encodeURIComponent(String(project))}` +
      `/attachments/${encodeURIComponent(String(attachment))}/content`;
    const response = await this.#send("GET", target, { accept: "*/*" }, undefined);
    return new Uint8Array(await response.arrayBuffer());
  }

  modelUsage(
    project: Id,
    options: { since?: When; until?: When } = {},
  ): Promise<Schemas["ModelUsage"]> {
    return this.#call("get", "/v1/projects/{project_id}/usage", {
      path: { project_id: project },
      query: { since: instant(options.since), until: instant(options.until) },
    });
  }

  modelBudget(project: Id): Promise<Schemas["ModelBudget"]> {
    return this.#call("get", "/v1/projects/{project_id}/model-budget", {
      path: { project_id: project },
    });
  }

  setModelBudget(
    project: Id,
    tokens: number | null,
    period: "day" | "month" = "month",
  ): Promise<Schemas["ModelBudget"]> {
    return this.#call("put", "/v1/projects/{project_id}/model-budget", {
      path: { project_id: project },
      body: { tokens, period },
    });
  }

  setExtractionSchema(
    project: Id,
    document: Schemas["ExtractionSchemaDocument"],
  ): Promise<Schemas["ExtractionSchema"]> {
    return this.#call("put", "/v1/projects/{project_id}/extraction-schema", {
      path: { project_id: project },
      body: document,
    });
  }

  extractionSchema(project: Id, version?: number): Promise<Schemas["ExtractionSchema"]> {
    return this.#call("get", "/v1/projects/{project_id}/extraction-schema", {
      path: { project_id: project },
      query: { version },
    });
  }

  extractionSchemaVersions(project: Id): Promise<Schemas["ExtractionSchemaVersionList"]> {
    return this.#call("get", "/v1/projects/{project_id}/extraction-schema/versions", {
      path: { project_id: project },
    });
  }

  episodeExtraction(project: Id, episode: Id): Promise<Schemas["EpisodeExtraction"]> {
    return this.#call("get", "/v1/projects/{project_id}/episodes/{episode_id}/extraction", {
      path: { project_id: project, episode_id: episode },
    });
  }

  extractionRejections(
    project: Id,
    options: {
      reason?: NonNullable<
        paths["/v1/projects/{project_id}/extraction-rejections"]["get"]["parameters"]["query"]
      >["reason"];
      limit?: number;
      cursor?: number;
    } = {},
  ): Promise<Schemas["ExtractionRejectionPage"]> {
    return this.#call("get", "/v1/projects/{project_id}/extraction-rejections", {
      path: { project_id: project },
      query: { reason: options.reason, limit: options.limit, cursor: options.cursor },
    });
  }

  async metrics(): Promise<string> {
    return (await this.#send("GET", "/metrics", { accept: "text/plain" }, undefined)).text();
  }

  /** One operation of the OpenAPI document: `path` and `method` must be one of its
   * operations, and the parts of the request and the answer have its types. */
  async #call<P extends keyof paths, M extends MethodOf<P>>(
    method: M,
    path: P,
    request: RequestOf<paths[P][M]>,
  ): Promise<AnswerOf<paths[P][M]>> {
    const names: Record<string, unknown> = request.path ?? {};
    let target: string = path.replace(/\{([^}]+)\}/g, (_, name: string) =>
      encodeURIComponent(String(names[name])),
    );
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(request.query ?? {})) {
      if (value !== undefined && value !== null) query.append(name, String(value));
    }
    if (query.toString()) target += `?${query}`;
    const header: Record<string, string> = {};
    for (const [name, value] of Object.entries(request.header ?? {})) {
      if (value !== undefined && value !== null) header[name] = String(value);
    }
    const response = await this.#send(method.toUpperCase(), target, header, request.body);
    return (await response.json()) as AnswerOf<paths[P][M]>;
  }

  async #send(
    method: string,
    target: string,
    header: Record<string, string>,
    body: unknown,
  ): Promise<Response> {
    const headers: Record<string, string> = { accept: "application/json", ...header };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    // FormData sets its own multipart content type, boundary included.
    const form = body instanceof FormData;
    if (body !== undefined && !form) headers["content-type"] = "application/json";
    const response = await this.#fetch(this.baseUrl + target, {
      method,
      headers,
      // JSON.stringify leaves out undefined fields (the server's defaults apply) and
      // writes a Date as ISO 8601.
      body: body === undefined ? undefined : form ? body : JSON.stringify(body),
      signal: this.#timeoutMs === null ? undefined : AbortSignal.timeout(this.#timeoutMs),
    });
    if (!response.ok) throw await ChronomemError.of(response);
    return response;
  }
}
