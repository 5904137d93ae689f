<#
.SYNOPSIS
    Installs (or uninstalls) the opsgate proxy as a Windows service.

.DESCRIPTION
    Windows only. Run in an elevated PowerShell (Run as administrator).

    Install:
      1. copies proxy.exe to -InstallDir (default C:\Program Files\opsgate),
         so the service does not depend on where you downloaded it; a
         -InstallDir it makes can be changed by SYSTEM and Administrators
         only (an existing one keeps its access list);
      2. runs `proxy.exe install --config CONFIG --name NAME`, which copies the
         config to %ProgramData%\NAME\proxy.yaml (readable by SYSTEM and
         Administrators only), makes %ProgramData%\NAME\state, and creates
         the service NAME: automatic start (manual with -ManualStart), restart
         on failure, log in the Event Log (Application, source NAME);
      3. with -Start, starts it; then shows `proxy.exe status`.

    Uninstall (-Uninstall): runs `proxy.exe uninstall --name NAME`, which
    stops the service and removes it and everything install made, then
    removes the copied proxy.exe (and -InstallDir, if empty) unless another
    service still runs that binary.

    The config's scripts_dir must be an absolute path to a directory only
    administrators can change (the service runs its scripts as LocalSystem),
    e.g. C:\Program Files\opsgate\scripts.

.EXAMPLE
    .\install-proxy.ps1 -Config .\proxy.yaml -Binary .\proxy.exe -Start

.EXAMPLE
    .\install-proxy.ps1 -Config .\standby.yaml -Binary .\proxy.exe -ManualStart

.EXAMPLE
    .\install-proxy.ps1 -Uninstall -Name proxy
#>
[CmdletBinding(DefaultParameterSetName = 'Install')]
param(
    [Parameter(ParameterSetName = 'Install', Mandatory = $true)]
    [string] $Config,

    [Parameter(ParameterSetName = 'Install')]
    [string] $Binary = '.\proxy.exe',

    [string] $Name = 'proxy',

    [string] $InstallDir = (Join-Path $env:ProgramFiles 'opsgate'),

    [Parameter(ParameterSetName = 'Install')]
    [switch] $ManualStart,

    [Parameter(ParameterSetName = 'Install')]
    [switch] $Start,

    [Parameter(ParameterSetName = 'Uninstall', Mandatory = $true)]
    [switch] $Uninstall
)

$ErrorActionPreference = 'Stop'

$principal = New-Object Security.Principal.WindowsPrincipal([Security.Principal.WindowsIdentity]::GetCurrent())
if (-not $principal.IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)) {
    throw 'Run this script in an elevated PowerShell (Run as administrator): installing a service needs it.'
}

$exe = Join-Path $InstallDir 'proxy.exe'

# Invoke-Proxy runs proxy.exe and stops the script when it fails; proxy.exe
# has said why on stderr.
function Invoke-Proxy {
    param([string[]] $Arguments)
    & $exe @Arguments
    if ($LASTEXITCODE -ne 0) {
        throw "proxy.exe $($Arguments -join ' ') failed (exit $LASTEXITCODE)"
    }
}

if ($Uninstall) {
    if (-not (Test-Path $exe)) {
        throw "$exe does not exist: was the proxy installed with -InstallDir $InstallDir?"
    }
    Invoke-Proxy @('uninstall', '--name', $Name)
    # The service just uninstalled may still be listed (marked for deletion
    # while a handle to it is open: services.msc, say): it is not another user.
    $users = @(Get-CimInstance Win32_Service | Where-Object { $_.Name -ne $Name -and $_.PathName -like "*$exe*" })
    if ($users.Count -eq 0) {
        Remove-Item -LiteralPath $exe
        if (-not (Get-ChildItem -LiteralPath $InstallDir -Force)) {
            Remove-Item -LiteralPath $InstallDir
        }
        Write-Host "Removed $exe."
    } else {
        Write-Host "Kept ${exe}: service(s) $($users.Name -join ', ') still use it."
    }
    return
}

# ProviderPath, not Path: proxy.exe needs the file system's own path, not a
# PowerShell drive's (X:\ of New-PSDrive) or a FileSystem::\\server\share one.
$Binary = (Resolve-Path -LiteralPath $Binary).ProviderPath
$Config = (Resolve-Path -LiteralPath $Config).ProviderPath
if (-not (Test-Path -LiteralPath $InstallDir)) {
    New-Item -ItemType Directory -Path $InstallDir | Out-Null
    # The service runs proxy.exe as LocalSystem: whoever can replace it
    # is LocalSystem. Under C:\Program Files only administrators can, but a
    # folder made elsewhere (C:\opsgate) lets every authenticated user
    # change it. So the folder gets its own access list, by SID so that it
    # works in every language: SYSTEM and Administrators full control,
    # Users read and execute.
    & icacls.exe $InstallDir /inheritance:r /grant:r '*S-1-5-18:(OI)(CI)F' '*S-1-5-32-544:(OI)(CI)F' '*S-1-5-32-545:(OI)(CI)RX' | Out-Null
    if ($LASTEXITCODE -ne 0) {
        throw "icacls.exe could not restrict $InstallDir to SYSTEM and Administrators (exit $LASTEXITCODE)"
    }
    # Made a moment ago, it was open to others until now: what they put
    # there meanwhile (a proxy.exe of theirs, which the copy would fill but
    # not make ours) is refused.
    if (Get-ChildItem -LiteralPath $InstallDir -Force) {
        throw "$InstallDir, made just now, is not empty: someone else wrote to it. Remove it and run this script again."
    }
}
if ($Binary -ne $exe) {
    $running = @(Get-CimInstance Win32_Service | Where-Object { $_.PathName -like "*$exe*" -and $_.State -ne 'Stopped' })
    if ($running.Count -gt 0) {
        throw "$exe is in use by running service(s) $($running.Name -join ', '): stop them first (see docs/upgrade-proxy.md)."
    }
    Copy-Item -LiteralPath $Binary -Destination $exe -Force
}

$installArgs = @('install', '--config', $Config, '--name', $Name)
if ($ManualStart) {
    $installArgs += '--manual-start'
}
Invoke-Proxy $installArgs
if ($Start) {
    Invoke-Proxy @('start', '--name', $Name)
}
Invoke-Proxy @('status', '--name', $Name)
