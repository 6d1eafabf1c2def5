// swift-tools-version:6.2
// Courier: purchased-content delivery on Linux (see ../shared/DESIGN.md for the map).

import PackageDescription

/// Every target of ours: Swift 6 language mode (the tools-version default) and warnings as errors.
let strict: [SwiftSetting] = [
    .treatAllWarnings(as: .error),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Courier",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "Courier", targets: ["Courier"]),
        .executable(name: "courier", targets: ["CourierCLI"]),
        // The parsers of untrusted bytes as fuzz targets; `scripts/fuzz` links this library into a
        // libFuzzer driver (Tests/Fuzz/Driver), so it is a dynamic library holding its dependencies.
        .library(name: "CourierFuzzTargets", type: .dynamic, targets: ["CourierFuzzTargets"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"4.0.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.81.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.34.1"),
        // Beyond one machine (docs/scaling.md): the prestage queue and shared refunds in
        // PostgreSQL, Prometheus metrics for `serve` and prestage workers.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        // C bridges: module maps plus `static inline` typed shims, no logic.
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        .systemLibrary(
            name: "CArchive",
            pkgConfig: "libarchive",
            providers: [.apt(["libarchive-dev"])]
        ),
        // Linux system calls Swift cannot call directly (renameat2, syncfs, inode flags).
        .systemLibrary(name: "CSystemShims"),
        // D-Bus through sd-bus (libsystemd): NetworkManager's Metered property, desktop
        // notifications. Only Network/ imports it.
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // CRC-32 with carry-less multiplication (the check of a package's entries).
        .target(name: "CCRC32"),
        // The library others import. Only Transfer/ imports CCurl, only Packages/ CArchive and
        // only Placement/ CSystemShims, only Network/ CSystemd; `scripts/test` checks them.
        .target(
            name: "Courier",
            dependencies: [
                "CCurl",
                "CArchive",
                "CSystemShims",
                "CSystemd",
                "CCRC32",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                // RSASSA-PSS and PKCS#1 v1.5 signatures of TUF metadata (Trust/TUFPublicKey.swift).
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // The agent's control socket (Agent/AgentControlServer.swift).
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: strict
        ),
        // The origin behind `courier serve`; Hummingbird stays out of the client library.
        .target(
            name: "CourierServer",
            dependencies: [
                "Courier",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: strict
        ),
        // PostgreSQL for work and state shared by many machines (docs/scaling.md): the prestage
        // queue and the origin's refunds. PostgresNIO stays out of the client library.
        .target(
            name: "CourierPostgres",
            dependencies: [
                "Courier",
                "CourierServer",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        // The `courier` executable: one file per subcommand, only public API of the libraries.
        .executableTarget(
            name: "CourierCLI",
            dependencies: [
                "Courier",
                "CourierServer",
                "CourierPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict,
            // Release (built with --static-swift-stdlib, README): lld packs the binary's ~140,000
            // relative relocations into DT_RELR (27 KiB, glibc 2.36+) instead of a 3.2 MiB table the
            // loader reads whole at every start, and --no-export-dynamic undoes the static stdlib's
            // -export-dynamic (51,000 of our symbols in .dynsym; a dynamic build exports none):
            // about 4 MiB less peak RSS for `courier get` (docs/transfer.md "Memory").
            linkerSettings: [
                .unsafeFlags(
                    [
                        "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
                        "-Xlinker", "--no-export-dynamic",
                    ],
                    .when(platforms: [.linux], configuration: .release))
            ]
        ),
        // Real servers on loopback for the tests: nginx, the fault-injecting origin, fixtures.
        .target(
            name: "CourierTestSupport",
            dependencies: [
                "Courier",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            path: "Tests/CourierTestSupport",
            swiftSettings: strict
        ),
        // One entry point per parser of untrusted bytes (Tests/Fuzz/README.md).
        .target(
            name: "CourierFuzzTargets",
            dependencies: ["Courier", "CourierServer", "CourierPostgres"],
            path: "Tests/Fuzz/Targets",
            swiftSettings: strict
        ),
        .testTarget(
            name: "CourierTests",
            dependencies: [
                "Courier",
                "CCRC32",
                "CourierPostgres",
                "CourierTestSupport",
                "CourierFuzzTargets",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                // The PostgreSQL queue and refund store against a real server (Tests/CourierTests/Prestage).
                "CourierServer",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // The CLI's displays (top's rows, list's table, the progress bars) without a terminal.
                "CourierCLI",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "CourierServerTests",
            dependencies: [
                "Courier",
                "CourierServer",
                "CourierTestSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            swiftSettings: strict
        ),
    ]
)
