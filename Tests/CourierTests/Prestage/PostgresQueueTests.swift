@testable import Courier
@testable import CourierPostgres
import CourierServer
import CourierTestSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

/// Runs `body` with a `PostgresClient` on `server`, the client's `run()` beside it.
func withPostgresClient<T: Sendable>(_ server: PostgresServer, _ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
    let url = try PostgresURL(parsing: server.url)
    let logger = Logger(label: "test.postgres")
    let client = PostgresClient(configuration: try url.clientConfiguration, backgroundLogger: logger)
    return try await PostgresClientRunner.withRunningClient(client, logger: logger, body)
}

/// A task as the planner makes it (the queue only stores and hands it over).
func queueTask(_ index: Int) -> PrestageTask {
    let digest = String(repeating: String(index % 10), count: 64)
    return PrestageTask(
        contentIdentifier: "com.example.pack\(index)", productId: "com.example.pack\(index)", itemId: nil,
        source: URL(string: "http://127.0.0.1:9/pack\(index).zip")!,
        content: Catalog.Content(url: "pack\(index).zip", sha256: digest, length: 10, version: "1.0", placement: .cache),
        stagedPath: PrestagePlan.stagedPath(contentIdentifier: "com.example.pack\(index)", sha256: digest))
}

@Suite("PostgreSQL queue and refunds", .serialized)
struct PostgresQueueTests {
    static let logger = Logger(label: "test.queue")

    /// Creates the schema and an empty run; returns the run's id.
    static func newRun(_ client: PostgresClient) async throws -> Int64 {
        try await PostgresSchema.migrate(client, logger: logger)
        for try await id in try await client.query("INSERT INTO prestage_run (run_key, plan) VALUES ('test', '{}') RETURNING run_id").decode(Int64.self) {
            return id
        }
        throw CourierError(.internal, "no run id")
    }

    /// A connection to `server`, whose schema is migrated up to `version` (an older database).
    static func connection(to server: PostgresServer, migratedTo version: Int) async throws -> PostgresConnection {
        let url = try PostgresURL(parsing: server.url)
        let connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration, id: 1, logger: logger)
        #expect(try await PostgresSchema.migrate(connection: connection, upTo: version, logger: logger) == version)
        return connection
    }

    @Test("PostgreSQL binaries are installed (scripts/setup installs them; the suite needs them)")
    func binariesInstalled() {
        #expect(PostgresServer.isAvailable, "\(PostgresServer.unavailableReason)")
    }

    @Test("the schema is created once, recorded in courier_schema_version; migrating again changes nothing")
    func migrations() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let versions = try await withPostgresClient(server) { client in
            async let first = PostgresSchema.migrate(client, logger: Self.logger)
            async let second = PostgresSchema.migrate(client, logger: Self.logger)
            let both = try await [first, second]
            let third = try await PostgresSchema.migrate(client, logger: Self.logger)
            return both + [third]
        }
        #expect(versions == [PostgresSchema.currentVersion, PostgresSchema.currentVersion, PostgresSchema.currentVersion])
        #expect(
            try server.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM courier_schema_version")
                == PostgresSchema.migrations.map { String($0.version) }.joined(separator: ","))
        #expect(try server.psql("SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'prestage_%'") == "2")
        // A database migrated by a newer courier is refused, not used.
        try server.psql("INSERT INTO courier_schema_version (version) VALUES (999)")
        await #expect(throws: CourierError.self) {
            try await withPostgresClient(server) { try await PostgresSchema.migrate($0, logger: Self.logger) }
        }
    }

    /// The schema as PostgreSQL describes it: columns, indexes, constraints, versions recorded.
    static func schemaDescription(_ server: PostgresServer) throws -> [String] {
        try [
            "SELECT string_agg(table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, ''), ', ' ORDER BY table_name, column_name) FROM information_schema.columns WHERE table_schema = 'public'",
            "SELECT string_agg(indexdef, '; ' ORDER BY indexname) FROM pg_indexes WHERE schemaname = 'public'",
            "SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), '; ' ORDER BY conname) FROM pg_constraint WHERE connamespace = 'public'::regnamespace",
            "SELECT string_agg(version::text, ',' ORDER BY version) FROM courier_schema_version",
        ].map { try server.psql($0) }
    }

    @Test("8 sessions migrate one database at once, from nothing and from each older version, 20 times: one schema")
    func concurrentMigrations() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let configuration = try PostgresURL(parsing: server.url).connectionConfiguration
        let reset = "DROP SCHEMA public CASCADE; CREATE SCHEMA public"
        try await Self.connection(to: server, migratedTo: PostgresSchema.currentVersion).close()
        let reference = try Self.schemaDescription(server)
        for start in 0..<PostgresSchema.currentVersion {
            for round in 0..<20 {
                try server.psql(reset)
                if start > 0 { try await Self.connection(to: server, migratedTo: start).close() }
                // Each session as a separate process would open it: its own connection (backend).
                let versions = try await withThrowingTaskGroup(of: Int.self) { group in
                    for id in 0..<8 {
                        group.addTask {
                            let connection = try await PostgresConnection.connect(configuration: configuration, id: id, logger: Self.logger)
                            do {
                                let version = try await PostgresSchema.migrate(connection: connection, logger: Self.logger)
                                try await connection.close()
                                return version
                            } catch {
                                try? await connection.close()
                                throw error
                            }
                        }
                    }
                    return try await group.reduce(into: [Int]()) { $0.append($1) }
                }
                #expect(versions == Array(repeating: PostgresSchema.currentVersion, count: 8), "from \(start), round \(round)")
                #expect(try Self.schemaDescription(server) == reference, "from \(start), round \(round)")
            }
        }
    }

    @Test("a version 1 database migrates to 2: its runs' plans keep their JSON as stored bytes, uncompressed; task documents become optional")
    func migrationTwo() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let connection = try await Self.connection(to: server, migratedTo: 1)
        try server.psql("INSERT INTO prestage_run (run_key, plan) VALUES ('old', '{\"tasks\": [1, 2]}'::jsonb)")
        try server.psql("INSERT INTO prestage_task (run_id, download_id, content_identifier, task) SELECT run_id, 'd', 'c', '{\"x\": 1}' FROM prestage_run")
        #expect(try server.psql("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'prestage_run'::regclass AND attname = 'plan'") == "jsonb")
        #expect(try await PostgresSchema.migrate(connection: connection, upTo: 2, logger: Self.logger) == 2)
        try await connection.close()
        #expect(try server.psql("SELECT format_type(atttypid, atttypmod) || ' ' || attstorage::text FROM pg_attribute WHERE attrelid = 'prestage_run'::regclass AND attname = 'plan'") == "bytea e")
        #expect(try server.psql("SELECT convert_from(plan, 'UTF8')::jsonb = '{\"tasks\": [1, 2]}'::jsonb FROM prestage_run") == "t")
        #expect(try server.psql("SELECT task::text FROM prestage_task") == "{\"x\": 1}")
        try server.psql("INSERT INTO prestage_task (run_id, download_id, content_identifier) SELECT run_id, 'e', 'c' FROM prestage_run")
        #expect(try server.psql("SELECT count(*) FROM prestage_task WHERE task IS NULL") == "1")
    }

    @Test("a version 2 database migrates to 3: its tasks are numbered in the order they were inserted, new ones after them")
    func migrationThree() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let connection = try await Self.connection(to: server, migratedTo: 2)
        try server.psql("INSERT INTO prestage_run (run_key, plan) VALUES ('old', '\\x7b7d')")
        try server.psql("INSERT INTO prestage_task (run_id, download_id, content_identifier) SELECT run_id, d, 'c' FROM prestage_run, unnest(ARRAY['z', 'a', 'm']) d")
        #expect(try await PostgresSchema.migrate(connection: connection, upTo: 3, logger: Self.logger) == 3)
        try await connection.close()
        #expect(try server.psql("SELECT string_agg(download_id, ',' ORDER BY seq) FROM prestage_task") == "z,a,m")
        try server.psql("INSERT INTO prestage_task (run_id, download_id, content_identifier) SELECT run_id, 'b', 'c' FROM prestage_run")
        #expect(try server.psql("SELECT string_agg(download_id, ',' ORDER BY seq) FROM prestage_task") == "z,a,m,b")
        #expect(try server.psql("SELECT count(*) FROM pg_indexes WHERE indexname = 'prestage_task_waiting'") == "1")
        #expect(try server.psql("SELECT count(*) FROM pg_indexes WHERE indexname = 'prestage_task_claimable'") == "0")
        #expect(try server.psql("SELECT indexdef FROM pg_indexes WHERE indexname = 'prestage_task_claimed'").hasSuffix("WHERE (state = 'claimed'::text)"))
    }

    @Test("a version 3 database migrates to 4: no foreign key from tasks to runs; old runs still go with their tasks")
    func migrationFour() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let connection = try await Self.connection(to: server, migratedTo: 3)
        let foreignKeys = "SELECT count(*) FROM pg_constraint WHERE conrelid = 'prestage_task'::regclass AND contype = 'f'"
        #expect(try server.psql(foreignKeys) == "1")
        try server.psql("INSERT INTO prestage_run (run_key, plan, state, published_at) VALUES ('old', '\\x7b7d', 'published', now() - interval '8 days')")
        try server.psql("INSERT INTO prestage_task (run_id, download_id, content_identifier) SELECT run_id, 'd', 'c' FROM prestage_run")
        #expect(try await PostgresSchema.migrate(connection: connection, logger: Self.logger) == PostgresSchema.currentVersion)
        try await connection.close()
        #expect(try server.psql(foreignKeys) == "0")
        let removed = try await withPostgresClient(server) { client in
            try await RunTable(client: client, logger: Self.logger).removePublished()
        }
        #expect(removed == 1)
        #expect(try server.psql("SELECT count(*) FROM prestage_task") == "0")
    }

    @Test("claims take the run's tasks in order from where this process left off; one handed back behind it is claimed after those ahead")
    func claimsInOrder() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            let runId = try await Self.newRun(client)
            let one = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), logger: Self.logger)
            let other = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), logger: Self.logger)
            let tasks = (0..<6).map(queueTask)
            try await one.enqueue(tasks)
            func claim(_ queue: PostgresWorkQueue, _ worker: String) async throws -> Int? {
                guard let task = try await queue.claim(worker: worker) else { return nil }
                return tasks.firstIndex { $0.downloadId == task.downloadId }
            }
            #expect(try await claim(one, "a") == 0)
            #expect(try await claim(one, "a") == 1)
            // Another process starts from the beginning of the run, past what is claimed.
            #expect(try await claim(other, "x") == 2)
            #expect(try await claim(one, "a") == 3)
            // Task 0 comes back (its worker was interrupted): the tasks ahead go first, then it.
            #expect(try await one.complete(tasks[0], worker: "a", outcome: .failed(CourierError(.paused, "SIGINT"))))
            #expect(try await claim(one, "a") == 4)
            #expect(try await claim(one, "a") == 5)
            #expect(try await claim(one, "a") == 0)
            #expect(try await claim(one, "a") == nil)
            #expect(try await claim(other, "x") == nil)
            #expect(try server.psql("SELECT count(*) FROM prestage_task WHERE state = 'claimed'") == "6")
        }
    }

    @Test("claims follow the tasks' places in the run (seq), not where their rows lie in the table")
    func claimsFollowSeq() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            let runId = try await Self.newRun(client)
            let queue = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), logger: Self.logger)
            let tasks = (0..<4).map(queueTask)
            try await queue.enqueue(tasks)
            // The places reversed: the rows still lie in insertion order, the run's order is 3, 2, 1, 0.
            try server.psql("UPDATE prestage_task SET seq = 1000 - seq")
            var order: [Int] = []
            while let task = try await queue.claim(worker: "a") {
                order.append(try #require(tasks.firstIndex { $0.downloadId == task.downloadId }))
            }
            #expect(order == [3, 2, 1, 0])
        }
    }

    @Test("claim, lease and complete: a task is handed to one worker; a lost lease cannot overwrite the new owner's outcome")
    func claimLeaseComplete() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            let runId = try await Self.newRun(client)
            let queue = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), logger: Self.logger)
            let one = queueTask(1)
            let two = queueTask(2)
            try await queue.enqueue([one, two])
            try await queue.enqueue([one, two])  // not added twice
            #expect(try server.psql("SELECT count(*) FROM prestage_task") == "2")

            // Concurrent claims: each task goes to exactly one worker (both rows may carry the
            // name of one of them: claims made together share a statement).
            async let a = queue.claim(worker: "a")
            async let b = queue.claim(worker: "b")
            let (taskA, taskB) = try await (a, b)
            let claimed = [taskA, taskB].compactMap { $0?.downloadId }.sorted()
            #expect(claimed == [one.downloadId, two.downloadId])
            #expect(try await queue.claim(worker: "c") == nil)
            let ownerOfTwo = taskA?.downloadId == two.downloadId ? "a" : "b"
            let ownerOfOne = ownerOfTwo == "a" ? "b" : "a"
            #expect(try await queue.complete(one, worker: ownerOfOne, outcome: .staged(bytesFetched: 10, unpackedLength: 5)))

            // Worker `ownerOfTwo` stops renewing: its lease expires and `c` takes the task over.
            #expect(try await queue.renew(two, worker: ownerOfTwo))
            #expect(try await queue.renew(two, worker: "c") == false)
            try server.psql("UPDATE prestage_task SET lease_expires_at = now() - interval '1 second' WHERE download_id = '\(two.downloadId)'")
            let progress = try await queue.progress()
            #expect(progress.open == 1 && progress.claimable == 1)
            #expect(try await queue.claim(worker: "c")?.downloadId == two.downloadId)
            #expect(try await queue.complete(two, worker: "c", outcome: .staged(bytesFetched: 10, unpackedLength: nil)))
            // The worker that lost its lease comes back late: nothing it says is recorded.
            #expect(try await queue.renew(two, worker: ownerOfTwo) == false)
            let late = try await queue.complete(two, worker: ownerOfTwo, outcome: .failed(CourierError(.network, "late")))
            #expect(late == false)
            let outcomes = try await queue.outcomes()
            #expect(outcomes[two.contentIdentifier] == .staged(bytesFetched: 10, unpackedLength: nil))
            #expect(outcomes[one.contentIdentifier] == .staged(bytesFetched: 10, unpackedLength: 5))
            #expect(try server.psql("SELECT attempts FROM prestage_task WHERE download_id = '\(two.downloadId)'") == "2")
            #expect(try await queue.awaitWork() == false)
        }
    }

    @Test("a batch claim serves idle workers; each records as itself; unstarted tasks are handed back; outcomes recorded together")
    func batchClaim() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            let runId = try await Self.newRun(client)
            let queue = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), claimBatch: 3, logger: Self.logger)
            try await queue.enqueue((10..<14).map(queueTask))
            // One statement claims three tasks under the first worker's name.
            let first = try #require(try await queue.claim(worker: "a"))
            #expect(try server.psql("SELECT count(*) FROM prestage_task WHERE state = 'claimed' AND worker = 'a'") == "3")
            // `b` starts one of them: its renewals and outcome count as the row's owner; another worker's do not.
            let second = try #require(try await queue.claim(worker: "b"))
            #expect(second.downloadId != first.downloadId)
            #expect(try await queue.renew(second, worker: "b"))
            #expect(try await queue.renew(second, worker: "c") == false)
            #expect(try await queue.complete(second, worker: "c", outcome: .failed(CourierError(.network, "not mine"))) == false)
            #expect(try await queue.complete(second, worker: "b", outcome: .staged(bytesFetched: 10, unpackedLength: nil)))
            #expect(try await queue.complete(first, worker: "a", outcome: .staged(bytesFetched: 10, unpackedLength: nil)))
            // The third was never started: handed back, it waits for any worker, its attempt not counted.
            await queue.handBackUnstarted()
            #expect(try server.psql("SELECT count(*) FROM prestage_task WHERE state = 'waiting' AND attempts = 0") == "2")
            let third = try #require(try await queue.claim(worker: "c"))
            let fourth = try #require(try await queue.claim(worker: "d"))
            #expect(try await queue.claim(worker: "e") == nil)
            async let x = queue.complete(third, worker: "c", outcome: .staged(bytesFetched: 10, unpackedLength: 5))
            async let y = queue.complete(fourth, worker: "d", outcome: .failed(CourierError(.integrity, "bad")))
            #expect(try await [x, y] == [true, true])
            let outcomes = try await queue.outcomes()
            #expect(outcomes.count == 4)
            #expect(outcomes[third.contentIdentifier] == .staged(bytesFetched: 10, unpackedLength: 5))
            #expect(outcomes[fourth.contentIdentifier] == .failed(CourierError(.integrity, "bad")))
            #expect(try await queue.awaitWork() == false)
        }
    }

    @Test("news: a run inserted, a run published and a lock given up wake a listening process; the lock is free at once")
    func runNews() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            try await PostgresSchema.migrate(client, logger: Self.logger)
            let configuration = try PostgresURL(parsing: server.url).connectionConfiguration
            let waiting = try await PostgresConnection.connect(configuration: configuration, id: 7, logger: Self.logger)
            let coordinating = try await PostgresConnection.connect(configuration: configuration, id: 8, logger: Self.logger)
            let news = await RunNews.listen(on: waiting, logger: Self.logger)
            let runs = RunTable(client: client, logger: Self.logger)
            // Waits up to 30 s (a poll interval far longer than a notification takes) for news since `seen`.
            func heard(since seen: UInt64) async throws -> Bool {
                try await news.signal.wait(upTo: .seconds(30), unlessSignalledSince: seen)
                return news.generation != seen
            }
            // A plan as the planner makes it: its task is its upstream catalog's entry.
            let task = String(decoding: try JSONEncoder().encode(queueTask(70)), as: UTF8.self)
            let entry = String(decoding: try JSONEncoder().encode(queueTask(70).content), as: UTF8.self)
            let plan = try PrestagePlan.decode(Data(
                #"{"tasks": [\#(task)], "unchanged": [], "refused": [], "upstream": {"bundleId": "com.example.app", "products": [{"productId": "com.example.pack70", "content": \#(entry)}]}}"#.utf8))
            var seen = news.generation
            let runId = try await runs.insert("news", plan: plan)
            #expect(try await heard(since: seen))
            #expect(try server.psql("SELECT count(*) FROM prestage_task WHERE run_id = \(runId)") == "1")
            seen = news.generation
            try await runs.markPublished(runId)
            #expect(try await heard(since: seen))
            #expect(try await runs.isPublished(runId))
            // The coordinator's lock, given up: free for the waiting process as soon as it hears.
            #expect(try await runs.tryLock("news", on: coordinating))
            #expect(try await runs.tryLock("news", on: waiting) == false)
            seen = news.generation
            await runs.release("news", on: coordinating)
            #expect(try await heard(since: seen))
            #expect(try await runs.tryLock("news", on: waiting))
            // The last open tasks of a run recorded: the waiting process hears it, its idle workers too.
            // A run's process holds its plan's tasks (their rows name them only).
            let queue = PostgresWorkQueue(client: client, runId: runId, tasks: plan.tasks, logger: Self.logger)
            try await queue.enqueue((71..<73).map(queueTask))
            let idle = CompletionSignal()
            news.forward(to: idle)
            let first = try #require(try await queue.claim(worker: "w"))
            #expect(try await queue.complete(first, worker: "w", outcome: .staged(bytesFetched: 1, unpackedLength: nil)))
            // Three tasks in all (the plan's and these two): the record of the third ends the run.
            let second = try #require(try await queue.claim(worker: "w"))
            let last = try #require(try await queue.claim(worker: "w"))
            #expect(try await queue.claim(worker: "w") == nil)
            #expect(try await queue.complete(second, worker: "w", outcome: .staged(bytesFetched: 1, unpackedLength: nil)))
            seen = news.generation
            let idleSeen = idle.generation
            #expect(try await queue.complete(last, worker: "w", outcome: .failed(CourierError(.network, "gone"))))
            #expect(try await heard(since: seen))
            try await idle.wait(upTo: .seconds(30), unlessSignalledSince: idleSeen)
            #expect(idle.generation != idleSeen)
            news.stop()
            try await waiting.close()
            try await coordinating.close()
        }
    }

    @Test("a claim hands over the plan's task; a task the process does not know is read from its row")
    func claimKnownTasks() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            let runId = try await Self.newRun(client)
            let tasks = (60..<63).map(queueTask)
            try await PostgresWorkQueue(client: client, runId: runId, logger: Self.logger).enqueue(tasks)
            // The rows' copies are damaged: a process that knows the plan never reads them...
            try server.psql("UPDATE prestage_task SET task = '{\"damaged\": true}'")
            let planned = PostgresWorkQueue(client: client, runId: runId, tasks: tasks, logger: Self.logger)
            let first = try #require(try await planned.claim(worker: "p"))
            #expect(tasks.contains(first))
            // ...one that does not reads the row, and refuses what it cannot read.
            let stranger = PostgresWorkQueue(client: client, runId: runId, logger: Self.logger)
            await #expect(throws: CourierError.self) { _ = try await stranger.claim(worker: "s") }
            let second = try #require(tasks.first { $0.downloadId != first.downloadId })
            let encoded = String(decoding: try JSONEncoder().encode(second), as: UTF8.self)
            try server.psql("UPDATE prestage_task SET task = '\(encoded)', state = 'waiting', attempts = 0 WHERE download_id = '\(second.downloadId)'")
            try server.psql("UPDATE prestage_task SET state = 'staged' WHERE download_id NOT IN ('\(first.downloadId)', '\(second.downloadId)')")
            #expect(try await stranger.claim(worker: "s") == second)
            // A run's rows name their tasks only (the plan holds them): a process without the
            // plan cannot take one and says so.
            try server.psql("UPDATE prestage_task SET task = NULL, state = 'waiting', attempts = 0 WHERE download_id = '\(first.downloadId)'")
            do {
                _ = try await stranger.claim(worker: "s")
                Issue.record("a task with neither a plan nor a document was handed over")
            } catch let error as CourierError {
                #expect(error.code == .integrity, "\(error)")
            }
        }
    }

    @Test("outcomes: staged ones recorded here come from memory, the rest (another process's, failures, strays) from the table")
    func outcomesReadBack() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            let runId = try await Self.newRun(client)
            // Two processes on one run: each its own queue object and worker names.
            let here = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), logger: Self.logger)
            let there = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), logger: Self.logger)
            try await here.enqueue((50..<55).map(queueTask))
            let a = try #require(try await here.claim(worker: "here-1"))
            let b = try #require(try await here.claim(worker: "here-2"))
            let c = try #require(try await there.claim(worker: "there-1"))
            let d = try #require(try await there.claim(worker: "there-2"))
            #expect(try await here.complete(a, worker: "here-1", outcome: .staged(bytesFetched: 1, unpackedLength: 2)))
            #expect(try await here.complete(b, worker: "here-2", outcome: .failed(CourierError(.integrity, "bad here"))))
            #expect(try await there.complete(c, worker: "there-1", outcome: .staged(bytesFetched: 3, unpackedLength: nil)))
            #expect(try await there.complete(d, worker: "there-2", outcome: .failed(CourierError(.network, "bad there"))))
            // A staged row under this process's name that it did not record (not expected): read, not guessed.
            let e = try #require(try await here.claim(worker: "here-1"))
            try server.psql(
                """
                UPDATE prestage_task SET state = 'staged', outcome = '{"status": "staged", "bytesFetched": 5}'
                WHERE download_id = '\(e.downloadId)'
                """)
            let expected: [String: PrestageOutcome] = [
                a.contentIdentifier: .staged(bytesFetched: 1, unpackedLength: 2),
                b.contentIdentifier: .failed(CourierError(.integrity, "bad here")),
                c.contentIdentifier: .staged(bytesFetched: 3, unpackedLength: nil),
                d.contentIdentifier: .failed(CourierError(.network, "bad there")),
                e.contentIdentifier: .staged(bytesFetched: 5, unpackedLength: nil),
            ]
            #expect(try await here.outcomes() == expected)
            #expect(try await there.outcomes() == expected)
            // What this process recorded as staged is not read back: its row comes without an outcome.
            let owners = here.stagedHere.snapshot().owners
            #expect(owners == ["here-1"])
            try server.psql("UPDATE prestage_task SET outcome = '{}' WHERE download_id = '\(a.downloadId)'")
            #expect(try await here.outcomes()[a.contentIdentifier] == .staged(bytesFetched: 1, unpackedLength: 2))
            await #expect(throws: CourierError.self) { _ = try await there.outcomes() }
        }
    }

    @Test("workers that claim at once share statements: distinct tasks, each renewed and recorded as its worker")
    func groupClaims() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            let runId = try await Self.newRun(client)
            let queue = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), claimBatch: 2, logger: Self.logger)
            try await queue.enqueue((20..<40).map(queueTask))
            let workers = (0..<12).map { "w\($0)" }
            let claimed = try await withThrowingTaskGroup(of: (String, PrestageTask?).self) { group in
                for worker in workers { group.addTask { (worker, try await queue.claim(worker: worker)) } }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
            let tasks = workers.compactMap { claimed[$0] ?? nil }
            #expect(tasks.count == workers.count)
            #expect(Set(tasks.map(\.downloadId)).count == workers.count)
            // Fewer claimers' names than claimers: rows claimed together carry one name.
            let names = try server.psql("SELECT count(DISTINCT worker) FROM prestage_task WHERE state = 'claimed'")
            #expect((Int(names) ?? 0) >= 1 && (Int(names) ?? 0) <= workers.count)
            for worker in workers {
                let task = try #require(claimed[worker] ?? nil)
                #expect(try await queue.renew(task, worker: worker))
                #expect(try await queue.complete(task, worker: "someone-else", outcome: .staged(bytesFetched: 1, unpackedLength: nil)) == false)
                #expect(try await queue.complete(task, worker: worker, outcome: .staged(bytesFetched: 1, unpackedLength: nil)))
            }
            #expect(try server.psql("SELECT count(*) FROM prestage_task WHERE state = 'staged'") == "12")
            // The rest: claimed one by one, then none.
            var rest = 0
            while let task = try await queue.claim(worker: "tail") {
                #expect(try await queue.complete(task, worker: "tail", outcome: .staged(bytesFetched: 1, unpackedLength: nil)))
                rest += 1
            }
            #expect(rest == 8)
            #expect(try await queue.awaitWork() == false)
        }
    }

    @Test("runs published over a week ago are removed with their tasks; newer and open runs stay")
    func removePublishedRuns() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            try await PostgresSchema.migrate(client, logger: Self.logger)
            try server.psql(
                """
                INSERT INTO prestage_run (run_key, plan, state, published_at) VALUES
                    ('old', '{}', 'published', now() - interval '8 days'),
                    ('recent', '{}', 'published', now() - interval '6 days'),
                    ('open', '{}', 'running', NULL)
                """)
            try server.psql(
                """
                INSERT INTO prestage_task (run_id, download_id, content_identifier, task)
                SELECT run_id, run_key || '-task', run_key, '{}' FROM prestage_run
                """)
            let runs = RunTable(client: client, logger: Self.logger)
            #expect(try await runs.removePublished() == 1)
            #expect(try server.psql("SELECT string_agg(run_key, ',' ORDER BY run_key) FROM prestage_run") == "open,recent")
            #expect(try server.psql("SELECT string_agg(download_id, ',' ORDER BY download_id) FROM prestage_task") == "open-task,recent-task")
            #expect(try await runs.removePublished() == 0)
        }
    }

    @Test("an interrupted worker hands its task back; a task whose workers keep dying fails after 5 leases")
    func handBackAndExhaustion() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try await withPostgresClient(server) { client in
            let runId = try await Self.newRun(client)
            let queue = PostgresWorkQueue(client: client, runId: runId, lease: .seconds(60), logger: Self.logger)
            let task = queueTask(3)
            try await queue.enqueue([task])
            #expect(try await queue.claim(worker: "a") != nil)
            #expect(try await queue.complete(task, worker: "a", outcome: .failed(CourierError(.paused, "SIGINT"))))
            #expect(try server.psql("SELECT state FROM prestage_task") == "waiting")
            #expect(try await queue.claim(worker: "b") != nil)
            try server.psql("UPDATE prestage_task SET attempts = 5, lease_expires_at = now() - interval '1 second'")
            #expect(try await queue.claim(worker: "c") == nil)
            #expect(try await queue.awaitWork() == false)
            guard case .failed(let error) = try await queue.outcomes()[task.contentIdentifier] else {
                Issue.record("the exhausted task has no failure recorded")
                return
            }
            #expect(error.message.contains("lease expired 5 times"))
        }
    }

    @Test("PostgreSQL URLs: what is accepted, what is refused, and the password never printed")
    func urls() throws {
        let url = try PostgresURL(parsing: "postgresql://courier:s%40cret@db.example.com:6543/stage")
        #expect(url.user == "courier" && url.password == "s@cret" && url.host == "db.example.com" && url.port == 6543)
        #expect(url.database == "stage" && url.tls == .require)
        #expect(url.description == "postgresql://courier:***@db.example.com:6543/stage")
        let local = try PostgresURL(parsing: "postgres://postgres@127.0.0.1/postgres")
        #expect(local.port == 5432 && local.tls == .disable && local.password == nil)
        #expect(try PostgresURL(parsing: "postgresql://u@[::1]:7/d?sslmode=require").host == "::1")
        #expect(try PostgresURL(parsing: "postgresql://u@10.0.0.1:7/d?sslmode=disable").tls == .disable)
        for bad in [
            "http://u@h/d", "postgresql://h/d", "postgresql://u@h", "postgresql://u@h/", "postgresql://u@h:0/d",
            "postgresql://u@h:70000/d", "postgresql://u@h/d?sslmode=verify", "postgresql://u@h/d?host=evil",
            "postgresql://u@h/a/b", "postgresql://u@h d/x", "postgresql://u@[::1/d", "postgresql://u@h/d#f",
            "postgresql://u@h:12a/d", "postgresql://u:p%zz@h/d",
        ] {
            #expect(throws: CourierError.self, "\(bad)") { try PostgresURL(parsing: bad) }
        }
        do {
            _ = try PostgresURL(parsing: "postgresql://u:topsecret@h/")
            Issue.record("accepted a URL without a database")
        } catch let error as CourierError {
            #expect(!error.message.contains("topsecret"), "\(error.message)")
            #expect(error.code == .usage)
        }
    }

    /// A notification as `verifyNotification` returns it, for transaction `id`.
    static func notification(
        _ type: String, uuid: String, transaction id: String, original: String? = nil, signed: Date
    ) throws -> VerifiedServerNotification {
        let json = """
            {"notificationType": "\(type)", "notificationUUID": "\(uuid)", "signedDate": \(Int64(signed.timeIntervalSince1970 * 1000)),
             "data": {"bundleId": "com.example.app", "environment": "Sandbox"}}
            """
        let transaction = VerifiedTransaction(
            transactionId: id, originalTransactionId: original ?? id, productId: "com.example.pack1", bundleId: "com.example.app",
            type: .nonConsumable, purchaseDate: signed.addingTimeInterval(-3600), environment: "Sandbox", signedDate: signed)
        return VerifiedServerNotification(notification: try ServerNotification(json: Data(json.utf8)), transaction: transaction)
    }

    @Test("a refund recorded through one gate's store is refused by another gate's store at once; replays and stale ones change nothing")
    func sharedRefunds() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let url = try PostgresURL(parsing: server.url)
        let first = try await PostgresRefundStore.open(url: url, logger: Self.logger)
        let second = try await PostgresRefundStore.open(url: url, refreshInterval: .seconds(3600), logger: Self.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await first.run() }
            group.addTask { try await second.run() }
            defer { group.cancelAll() }
            let now = Date()
            // The second gate is listening once its first reload has run: wait for its LISTEN.
            try await Self.waitUntil("the second gate listens") {
                try server.psql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'") == "2"
            }
            #expect(try await first.apply(Self.notification("REFUND", uuid: "u1", transaction: "1000", signed: now), now: now) == .revoked)
            #expect(first.isRevoked("1000"))
            try await Self.waitUntil("the refund reaches the second gate") { second.isRevoked("1000") }
            #expect(try await second.apply(Self.notification("REFUND", uuid: "u1", transaction: "1000", signed: now), now: now) == .duplicate)
            let older = now.addingTimeInterval(-60)
            #expect(try await second.apply(Self.notification("REFUND_REVERSED", uuid: "u0", transaction: "1000", signed: older), now: now) == .ignored)
            #expect(second.isRevoked("1000") && first.isRevoked("1000"))
            let later = now.addingTimeInterval(60)
            #expect(try await second.apply(Self.notification("REFUND_REVERSED", uuid: "u2", transaction: "1000", signed: later), now: now) == .reinstated)
            try await Self.waitUntil("the reinstatement reaches the first gate") { !first.isRevoked("1000") }
            #expect(try server.psql("SELECT count(*) FROM origin_notification") == "3")
        }
        // A gate opened after the refund loads it before it answers anyone.
        let now = Date()
        let third = try await PostgresRefundStore.open(url: url, logger: Self.logger)
        #expect(third.isRevoked("1000") == false)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await third.run() }
            defer { group.cancelAll() }
            let outcome = try await third.apply(Self.notification("REVOKE", uuid: "u3", transaction: "2000", signed: now), now: now)
            #expect(outcome == .revoked)
        }
        let fourth = try await PostgresRefundStore.open(url: url, logger: Self.logger)
        #expect(fourth.isRevoked("2000"))
    }

    @Test("a refund of a restored copy reaches every gate as a refund of the purchase: at once, on reload, and its reversal too")
    func sharedRefundOfARestoredCopy() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let url = try PostgresURL(parsing: server.url)
        let first = try await PostgresRefundStore.open(url: url, logger: Self.logger)
        let second = try await PostgresRefundStore.open(url: url, refreshInterval: .seconds(3600), logger: Self.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await first.run() }
            group.addTask { try await second.run() }
            defer { group.cancelAll() }
            let now = Date()
            try await Self.waitUntil("the second gate listens") {
                try server.psql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'") == "2"
            }
            let refund = try Self.notification("REFUND", uuid: "c1", transaction: "5001", original: "5000", signed: now)
            #expect(try await first.apply(refund, now: now) == .revoked)
            #expect(first.isRevoked("5001") && first.isPurchaseRevoked(originalTransactionId: "5000"))
            #expect(!first.isRevoked("5000"), "the original's own transaction was not named")
            try await Self.waitUntil("the refund reaches the second gate") { second.isPurchaseRevoked(originalTransactionId: "5000") }
            // A gate that opens now loads it with its original.
            let third = try await PostgresRefundStore.open(url: url, logger: Self.logger)
            #expect(third.isPurchaseRevoked(originalTransactionId: "5000") && third.isRevoked("5001"))
            #expect(!third.isPurchaseRevoked(originalTransactionId: "5001") || third.isRevoked("5001"))
            let later = now.addingTimeInterval(60)
            let reversal = try Self.notification("REFUND_REVERSED", uuid: "c2", transaction: "5001", original: "5000", signed: later)
            #expect(try await second.apply(reversal, now: now) == .reinstated)
            try await Self.waitUntil("the reversal reaches the first gate") { !first.isPurchaseRevoked(originalTransactionId: "5000") }
            #expect(!second.isPurchaseRevoked(originalTransactionId: "5000"))
        }
        // The NOTIFY payload carries the original; one without it names the transaction alone.
        let revocation = RevokedSet.Revocation(transactionId: "5001", originalTransactionId: "5000")
        #expect(PostgresRefundStore.parse(PostgresRefundStore.message(revocation, revoked: true))?.0 == revocation)
        #expect(PostgresRefundStore.parse("07")?.0 == RevokedSet.Revocation(transactionId: "7", originalTransactionId: "7"))
        #expect(PostgresRefundStore.parse("x7") == nil && PostgresRefundStore.parse("1") == nil && PostgresRefundStore.parse("17\n") == nil)
    }

    @Test("a gate stopped while its pool is still connecting stops: 40 stores cancelled early, none left hanging")
    func stopWhileConnecting() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let url = try PostgresURL(parsing: server.url)
        // Stores stopped while their pool is still creating connections: right after an apply
        // that leased before run() began, or a moment after run() began. postgres-nio's run()
        // once missed the end of such a shutdown and the suite hung (the pool had logged
        // "Connection creation failed … clientClosedConnection"); it does not reproduce at will,
        // so this races it 40 times under a deadline, and runnerGrace pins the bound itself.
        let stopped = try await Self.withDeadline(.seconds(90)) {
            for index in 0..<40 {
                let store = try await PostgresRefundStore.open(url: url, logger: Self.logger)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    if index % 2 == 0 {
                        let now = Date()
                        group.addTask {
                            _ = try await store.apply(
                                Self.notification("REVOKE", uuid: "s\(index)", transaction: "\(3000 + index)", signed: now), now: now)
                        }
                        group.addTask { try await store.run() }
                        try await group.next()
                    } else {
                        group.addTask { try await store.run() }
                        try await Task.sleep(for: .milliseconds(index % 4 == 1 ? 0 : 3))
                    }
                    group.cancelAll()
                }
            }
        }
        #expect(stopped, "a refund store's run() did not return after cancellation")
    }

    @Test("PostgresClientRunner: returns at once when the pool ends; within the grace when it ignores cancellation")
    func runnerGrace() async throws {
        let logger = Self.logger
        let quick = ContinuousClock.now
        await PostgresClientRunner.runCancellable(grace: .seconds(30), logger: logger) {}
        #expect(ContinuousClock.now - quick < .seconds(10))
        // An operation that never ends, whatever happens: the caller still gets back after the grace.
        let stuck = Shared<CheckedContinuation<Void, Never>?>(nil)
        let caller = Task {
            await PostgresClientRunner.runCancellable(grace: .milliseconds(200), logger: logger) {
                await withCheckedContinuation { continuation in stuck.withLock { $0 = continuation } }
            }
        }
        try await Self.waitUntil("the operation runs") { stuck.withLock { $0 != nil } }
        let cancelled = ContinuousClock.now
        caller.cancel()
        let returned = try await Self.withDeadline(.seconds(30)) { await caller.value }
        #expect(returned)
        #expect(ContinuousClock.now - cancelled >= .milliseconds(200))
        stuck.withLock { $0?.resume(); $0 = nil }
    }

    /// Runs `body` and reports whether it ended within `limit` (true), or gave up on it (false):
    /// a hang becomes a failed expectation, not a suite that never ends.
    static func withDeadline(_ limit: Duration, _ body: @escaping @Sendable () async throws -> Void) async throws -> Bool {
        let work = Task { try await body() }
        let deadline = ContinuousClock.now + limit
        let finished = Shared(false)
        let watcher = Task {
            _ = try? await work.value
            finished.withLock { $0 = true }
        }
        while ContinuousClock.now < deadline {
            if finished.withLock({ $0 }) {
                try await work.value
                return true
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        watcher.cancel()
        return false
    }

    /// A value shared with escaping closures.
    final class Shared<Value: Sendable>: Sendable {
        let mutex: Mutex<Value>
        init(_ value: Value) { mutex = Mutex(value) }
        func withLock<R: Sendable>(_ body: (inout sending Value) -> sending R) -> R { mutex.withLock(body) }
    }

    /// Polls `condition` every 20 ms for up to 30 s (an event in another process or connection).
    static func waitUntil(_ what: String, _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if try condition() { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("timed out waiting until \(what)")
    }
}

@Suite("Completion signal")
struct CompletionSignalTests {
    @Test("a signal wakes every waiter; a wait with no signal ends at its timeout; cancellation ends a wait")
    func signalTimeoutCancel() async throws {
        let signal = CompletionSignal()
        // Woken by a signal long before the timeout. A signal sent before a waiter registered
        // does not wake it, so the signal is repeated until both waiters have returned.
        let clock = ContinuousClock()
        let start = clock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<2 {
                group.addTask { try await signal.wait(upTo: .seconds(60)) }
            }
            let signaller = Task {
                while !Task.isCancelled {
                    signal.signal()
                    try? await Task.sleep(for: .milliseconds(10))
                }
            }
            defer { signaller.cancel() }
            try await group.waitForAll()
        }
        #expect(start.duration(to: clock.now) < .seconds(30))
        // No signal: the timeout ends the wait.
        let timed = clock.now
        try await signal.wait(upTo: .milliseconds(50))
        #expect(timed.duration(to: clock.now) >= .milliseconds(50))
        // Cancelled: the wait throws without waiting for its timeout.
        let waiting = Task { try await signal.wait(upTo: .seconds(60)) }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
    }

    @Test("a signal sent after the generation was read ends the wait at once; none sent, the timeout does")
    func signalledSince() async throws {
        let signal = CompletionSignal()
        let clock = ContinuousClock()
        let seen = signal.generation
        signal.signal()  // before the wait registers: not lost
        let start = clock.now
        try await signal.wait(upTo: .seconds(60), unlessSignalledSince: seen)
        #expect(start.duration(to: clock.now) < .seconds(30))
        let current = signal.generation
        #expect(current == seen + 1)
        let timed = clock.now
        try await signal.wait(upTo: .milliseconds(50), unlessSignalledSince: current)
        #expect(timed.duration(to: clock.now) >= .milliseconds(50))
    }

    @Test("concurrent callers share query runs, each one started after it called; an error reaches its callers")
    func coalescedQuery() async throws {
        final class Runs: Sendable {
            let count = Mutex(0)
            func next() -> Int {
                count.withLock { count in
                    count += 1
                    return count
                }
            }
            var current: Int { count.withLock { $0 } }
        }
        let query = CoalescedQuery<Int>()
        let runs = Runs()
        let callers = 24
        // The first run (one caller's) lasts until every other caller waits: they all share the second.
        let body: @Sendable () async throws -> Int = {
            let number = runs.next()
            while number == 1 && query.waitingCallers < callers - 1 { try await Task.sleep(for: .milliseconds(2)) }
            return number
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<callers {
                group.addTask {
                    let before = runs.current
                    let result = try await query.run(body)
                    #expect(result > before)
                }
                // The others call once the first caller's run has started.
                while index == 0 && runs.current == 0 { try await Task.sleep(for: .milliseconds(1)) }
            }
            try await group.waitForAll()
        }
        #expect(runs.current == 2)
        struct Failure: Error {}
        await #expect(throws: Failure.self) { try await query.run { throw Failure() } }
        #expect(try await query.run(body) == 3)
    }
}

@Suite("Grouped requests and claim pace")
struct GroupedRequestsTests {
    /// The batches a `GroupedRequests` processed, in order.
    final class Batches: Sendable {
        let sizes = Mutex<[Int]>([])
        func add(_ size: Int) { sizes.withLock { $0.append(size) } }
        var all: [Int] { sizes.withLock { $0 } }
    }

    static func grouped(gather: Duration?, batches: Batches) -> GroupedRequests<Int, Int> {
        GroupedRequests(gather: gather) { batch in
            batches.add(batch.count)
            for (request, continuation) in batch { continuation.resume(returning: request * 2) }
        }
    }

    @Test("requests made while a batch gathers share it, each with its own answer; a lone one waits out the gather")
    func gatherShares() async throws {
        let batches = Batches()
        let grouped = Self.grouped(gather: .seconds(60), batches: batches)
        let answers = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            for request in 0..<10 { group.addTask { (request, try await grouped.submit(request)) } }
            // Every request waits in the gathering batch (none is answered before the flush).
            while grouped.waitingCount < 10 { try await Task.sleep(for: .milliseconds(2)) }
            grouped.flush()
            return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        #expect(answers == Dictionary(uniqueKeysWithValues: (0..<10).map { ($0, $0 * 2) }))
        #expect(batches.all == [10])
        let short = Self.grouped(gather: .milliseconds(50), batches: batches)
        let clock = ContinuousClock()
        let start = clock.now
        #expect(try await short.submit(7) == 14)
        #expect(start.duration(to: clock.now) >= .milliseconds(50))
        #expect(batches.all == [10, 1])
    }

    @Test("an urgent request and a flush end the gather at once; once gathering stopped, no request waits")
    func urgentAndFlush() async throws {
        let batches = Batches()
        let grouped = Self.grouped(gather: .seconds(60), batches: batches)
        let clock = ContinuousClock()
        let start = clock.now
        #expect(try await grouped.submit(1, urgent: true) == 2)
        // A plain request waits for the gather, unless flushed.
        let waiting = Task { try await grouped.submit(2) }
        try await Task.sleep(for: .milliseconds(20))
        grouped.flush()
        #expect(try await waiting.value == 4)
        #expect(start.duration(to: clock.now) < .seconds(30))
        #expect(batches.all == [1, 1])
        // Once gathering stopped (a worker ran out of tasks: the run is ending), no later request
        // waits for a gather either.
        grouped.stopGathering()
        #expect(try await grouped.submit(3) == 6)
        #expect(try await grouped.submit(4) == 8)
        #expect(start.duration(to: clock.now) < .seconds(30))
        #expect(batches.all == [1, 1, 1, 1])
    }

    @Test("without a gather, requests made while a batch runs share the next")
    func noGather() async throws {
        let batches = Batches()
        let release = Mutex(false)
        let grouped = GroupedRequests<Int, Int>(gather: nil) { batch in
            batches.add(batch.count)
            // The first batch lasts until the others are waiting.
            if batches.all.count == 1 {
                while !release.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(2)) }
            }
            for (request, continuation) in batch { continuation.resume(returning: request) }
        }
        let first = Task { try await grouped.submit(0) }
        while batches.all.isEmpty { try await Task.sleep(for: .milliseconds(1)) }
        let others = (1...5).map { request in Task { try await grouped.submit(request) } }
        while grouped.waitingCount < 5 { try await Task.sleep(for: .milliseconds(2)) }
        release.withLock { $0 = true }
        #expect(try await first.value == 0)
        for (index, other) in others.enumerated() { #expect(try await other.value == index + 1) }
        // All five waited while the first batch ran: they share the next one.
        #expect(batches.all == [1, 5])
    }

    @Test("claims take ahead as many tasks as the busy workers start within the window, within the limit")
    func claimPace() {
        var pace = ClaimPace()
        let start = ContinuousClock.now
        // Nothing done yet: the initial number, within the limit.
        #expect(pace.ahead(within: .milliseconds(50), limit: 15) == ClaimPace.initial)
        #expect(pace.ahead(within: .milliseconds(50), limit: 1) == 1)
        // Four workers, 10 ms per task: 20 tasks start in 50 ms, capped at the limit.
        for worker in 0..<4 { pace.began("w\(worker)", at: start) }
        for worker in 0..<4 { pace.asked(by: "w\(worker)", at: start + .milliseconds(10)) }
        #expect(pace.mean == .milliseconds(10))
        for worker in 0..<4 { pace.began("w\(worker)", at: start + .milliseconds(10)) }
        #expect(pace.ahead(within: .milliseconds(50), limit: 15) == 15)
        #expect(pace.ahead(within: .milliseconds(20), limit: 15) == 8)
        // Long tasks (2 s, weighted in over a few): none taken ahead.
        var now = start + .milliseconds(10)
        for _ in 0..<20 {
            now += .seconds(2)
            for worker in 0..<4 {
                pace.asked(by: "w\(worker)", at: now)
                pace.began("w\(worker)", at: now)
            }
        }
        #expect(pace.ahead(within: .milliseconds(50), limit: 15) == 0)
        // A worker that asked and got nothing is not busy, and its idle time is no sample.
        let mean = pace.mean
        pace.asked(by: "w0", at: now + .seconds(1))
        #expect(pace.mean != mean)  // its last task (1 s) counts once, its idle time not at all
        let after = pace.mean
        pace.asked(by: "w0", at: now + .seconds(200))
        #expect(pace.mean == after)
    }
}
